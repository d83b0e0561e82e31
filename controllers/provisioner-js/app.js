// The component's entry: componentize-js exports `reconciler` from here.

import { exportController } from '../../guest-sdk/js/src/component.js';

import { Provisioner } from './provisioner.js';

export const reconciler = exportController(() => new Provisioner());
