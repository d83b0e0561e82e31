"""The component's entry: componentize-py exports `Reconciler` from here."""

from leasehold.component import export
from scheduler import Scheduler

Reconciler = export(Scheduler)
