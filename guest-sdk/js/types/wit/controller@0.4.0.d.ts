// world leasehold:controller/controller@0.4.0
export type * as LeaseholdControllerLogging040 from './interfaces/leasehold-controller-logging.js'; // import leasehold:controller/logging@0.4.0
export type * as LeaseholdControllerSettings040 from './interfaces/leasehold-controller-settings.js'; // import leasehold:controller/settings@0.4.0
export type * as LeaseholdControllerStore040 from './interfaces/leasehold-controller-store.js'; // import leasehold:controller/store@0.4.0
export type * as LeaseholdControllerTenure040 from './interfaces/leasehold-controller-tenure.js'; // import leasehold:controller/tenure@0.4.0
export type * as LeaseholdControllerTypes040 from './interfaces/leasehold-controller-types.js'; // import leasehold:controller/types@0.4.0
export type * as WasiClocksMonotonicClock0212 from './interfaces/wasi-clocks-monotonic-clock.js'; // import wasi:clocks/monotonic-clock@0.2.12
export type * as WasiClocksWallClock0212 from './interfaces/wasi-clocks-wall-clock.js'; // import wasi:clocks/wall-clock@0.2.12
export type * as WasiHttpOutgoingHandler0212 from './interfaces/wasi-http-outgoing-handler.js'; // import wasi:http/outgoing-handler@0.2.12
export type * as WasiHttpTypes0212 from './interfaces/wasi-http-types.js'; // import wasi:http/types@0.2.12
export type * as WasiIoError0212 from './interfaces/wasi-io-error.js'; // import wasi:io/error@0.2.12
export type * as WasiIoPoll0212 from './interfaces/wasi-io-poll.js'; // import wasi:io/poll@0.2.12
export type * as WasiIoStreams0212 from './interfaces/wasi-io-streams.js'; // import wasi:io/streams@0.2.12
export * as reconciler from './interfaces/leasehold-controller-reconciler.js'; // export leasehold:controller/reconciler@0.4.0
