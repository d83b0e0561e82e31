// The component's entry: componentize-js exports `reconciler` from here.

import { exportController } from '../../guest-sdk/js/src/component.js';

import { Scheduler } from './scheduler.js';

export const reconciler = exportController(() => new Scheduler());
