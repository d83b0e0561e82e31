"""The component's entry: componentize-py exports `Reconciler` from here."""

from leasehold.component import export
from provisioner import Provisioner

Reconciler = export(Provisioner)
