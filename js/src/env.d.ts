// Globals of the front end that no module declares, for the type check (jsconfig.json).

/** nbstream's version, substituted by js/build.mjs (esbuild `define`); absent elsewhere. */
declare const __NBSTREAM_VERSION__: string | undefined;
