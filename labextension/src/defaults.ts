/**
 * The lab's defaults, in one place: what it uses before, or without, a value of its own.
 *
 * They are the settings schema's (`schema/plugin.json`, whose server settings the
 * Python tests hold to the server's defaults); a jest test holds these to the schema.
 * The server's settings themselves always come from its answer, never from here.
 */
export const DEFAULTS = {
  /** Seconds between status refreshes when the settings registry gives none. */
  refreshInterval: 30,
  /** Where a MatrixLab Runner answers when none is set (the URL field's placeholder). */
  matrixlab_url: 'http://localhost:8765',
  /** The time limit's bounds in seconds, until the server's status gives its own maximum. */
  timeout_sec: { minimum: 1, maximum: 600 }
} as const;
