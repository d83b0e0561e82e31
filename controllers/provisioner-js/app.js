// The component's entry: componentize-js exports `reconciler` from here.

import { exportController } from './vendor/leasehold/component.js';

import { Provisioner } from './provisioner.js';

export const reconciler = exportController(() => new Provisioner());
