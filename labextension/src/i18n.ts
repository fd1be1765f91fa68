/**
 * The translator every user-facing string goes through (`trans.__('…')`), as
 * JupyterLab's own extensions do.
 *
 * The plugin hands over the lab's `ITranslator` when it starts; until then (and in
 * unit tests) the strings stay in English.
 */

import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';

/** The gettext domain of this extension's strings. */
export const DOMAIN = 'gitpilot_jupyter';

let bundle: TranslationBundle = nullTranslator.load(DOMAIN);

/** Use the lab's translator from now on. */
export function useTranslator(translator: ITranslator | null): void {
  bundle = (translator ?? nullTranslator).load(DOMAIN);
}

/**
 * Mark a string for translation where it is defined (a table of labels); it is
 * translated where it is shown, with `trans.__(label)`. Answers the string unchanged.
 */
export function N_(msgid: string): string {
  return msgid;
}

/** `trans.__('Run %1', name)` and `trans._n(...)`: always the current translator. */
export const trans = {
  __: (msgid: string, ...args: unknown[]): string => bundle.__(msgid, ...args),
  _n: (
    singular: string,
    plural: string,
    n: number,
    ...args: unknown[]
  ): string => bundle._n(singular, plural, n, ...args)
};
