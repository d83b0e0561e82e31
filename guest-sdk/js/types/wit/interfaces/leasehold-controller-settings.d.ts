/** @module Interface leasehold:controller/settings@0.4.0 **/
/**
 * The `[controllers.settings]` table of this controller's entry in the
 * host's config file, as JSON text: always a JSON object, `{}` when the
 * entry has no settings.
 * 
 * TOML values become JSON values: strings, booleans and arrays as
 * they are, tables as objects, integers and floats as numbers, and
 * dates and times (which JSON lacks) as strings in their TOML (RFC
 * 3339) form. `leasehold check` and every start or reload refuse
 * settings that are not a table, that hold a float JSON cannot carry
 * (`nan`, `inf`), or whose JSON text is larger than the host's bound
 * (64 KiB).
 * 
 * The settings are fixed for the life of a guest instance. A config
 * reload (SIGHUP) that changes them restarts the controller: its
 * lease is released and the next tenure's new instance reads the new
 * settings. Settings may hold secrets: the host never logs them.
 */
export function get(): string;
