"""The component's entry: `leasehold build` makes this module into the
component (componentize-py), which exports `Reconciler`."""

from leasehold.component import export
from controller import Greeter

Reconciler = export(Greeter)
