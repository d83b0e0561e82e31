// The component's entry: `leasehold build` makes this module into the
// component (componentize-js), which exports `reconciler`.

import { exportController } from './vendor/leasehold/component.js';

import { Greeter } from './controller.js';

export const reconciler = exportController(() => new Greeter());
