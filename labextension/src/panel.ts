/**
 * The sandbox settings panel: backend, MatrixLab connection, limits, Save, Test, lifecycle.
 *
 * The token field is write-only: the server only says `has_token`, so a saved token
 * shows as bullets; typing replaces it, Clear removes it. Save sends only the fields
 * that differ from what the server said; switching to Pass-through, or saving
 * MatrixLab right after its test said "Not reachable", asks first.
 */

import { Dialog, Notification } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { DEFAULTS } from './defaults';
import { confirmPassThrough, launchTrapped } from './dialog';
import { trans } from './i18n';
import {
  backendLabel,
  BACKENDS,
  saveOutcome,
  statusText,
  TOKEN_NOTE
} from './labels';
import { LifecycleCard } from './lifecycle';
import type { SandboxModel } from './model';
import { el } from './render';
import type {
  IConnectionReport,
  IMaskedSettings,
  IStatus,
  SettingsUpdate
} from './types';

const SAVED_TOKEN = '••••••••';

function field(label: string, input: HTMLElement, help = ''): HTMLElement {
  const wrap = el('label', 'jp-gitpilot-field');
  wrap.appendChild(el('span', 'jp-gitpilot-field-label', label));
  wrap.appendChild(input);
  if (help) {
    wrap.appendChild(el('span', 'jp-gitpilot-muted', help));
  }
  return wrap;
}

function input(type: string, name: string): HTMLInputElement {
  const node = el('input', 'jp-mod-styled');
  node.type = type;
  node.name = name;
  return node;
}

/** Describe a connection test for people: reachable, latency, version, Docker, hint. */
export function describeReport(report: IConnectionReport): string {
  const parts: string[] = [
    report.ok
      ? trans.__('Connected')
      : report.reachable === false
        ? trans.__('Not reachable')
        : trans.__('Problem')
  ];
  if (typeof report.latency_ms === 'number') {
    parts.push(trans.__('%1 ms', Math.round(report.latency_ms)));
  }
  if (report.version) {
    parts.push(trans.__('Runner %1', report.version));
  }
  if (report.docker_ok === true) {
    parts.push(trans.__('Docker OK'));
  } else if (report.docker_ok === false) {
    parts.push(trans.__('Docker down'));
  }
  return parts.join(' · ');
}

/** The time limit's bounds in seconds, both included. */
export interface ITimeoutRange {
  minimum: number;
  maximum: number;
}

/** Why `value` is no time limit the server takes (null: it is one). */
export function timeoutProblem(
  value: string,
  range: ITimeoutRange
): string | null {
  const seconds = Number(value);
  if (
    value.trim() !== '' &&
    Number.isInteger(seconds) &&
    seconds >= range.minimum &&
    seconds <= range.maximum
  ) {
    return null;
  }
  return trans.__(
    'Enter a whole number of seconds from %1 to %2.',
    range.minimum,
    range.maximum
  );
}

/** The form's fields that the settings API saves (the token aside). */
type FormValues = Pick<
  IMaskedSettings,
  | 'backend'
  | 'matrixlab_url'
  | 'matrixlab_image'
  | 'allow_network'
  | 'timeout_sec'
>;

/** The fields of `form` that differ from `saved` (only those are sent). */
export function changedFields(
  saved: Partial<FormValues> | null,
  form: Partial<FormValues>
): SettingsUpdate {
  const changes: SettingsUpdate = {};
  for (const key of Object.keys(form) as (keyof FormValues)[]) {
    const value = form[key];
    if (value === undefined) {
      continue;
    }
    const before = saved?.[key];
    const same =
      typeof value === 'string'
        ? value === String(before ?? '')
        : value === before;
    if (!same) {
      (changes as Record<string, unknown>)[key] = value;
    }
  }
  return changes;
}

/** The panel widget; `load()` fills the form from the server. */
export class SandboxPanel extends Widget {
  private readonly badge = el(
    'span',
    'jp-gitpilot-badge jp-gitpilot-badge-medium'
  );
  private readonly health = el('div', 'jp-gitpilot-health');
  private readonly radios: HTMLInputElement[] = [];
  private readonly url = input('url', 'matrixlab_url');
  private readonly token = input('password', 'matrixlab_token');
  private readonly clearToken = el(
    'button',
    'jp-mod-styled',
    trans.__('Clear')
  );
  private readonly image = input('text', 'matrixlab_image');
  private readonly network = input('checkbox', 'allow_network');
  private readonly timeout = input('number', 'timeout_sec');
  private readonly timeoutLabel = el('span', 'jp-gitpilot-field-label');
  private readonly timeoutError = el('div', 'jp-gitpilot-error');
  /** The server's bounds once its status says them; the schema's until then. */
  private timeoutRange: ITimeoutRange = { ...DEFAULTS.timeout_sec };
  private readonly saveButton = el(
    'button',
    'jp-mod-styled jp-mod-accept',
    trans.__('Save')
  );
  private readonly message = el('div', 'jp-gitpilot-message');
  private readonly report = el('div', 'jp-gitpilot-report');
  private readonly lifecycle: LifecycleCard;
  private tokenCleared = false;
  private filledBackend = '';
  /** The backends the administrator allows, from the last status (null: not known yet). */
  private allowed: string[] | null = null;
  /** What the server said the settings are, when the form was last filled. */
  private saved: FormValues | null = null;
  /** The last connection test: the URL it tried and whether the Runner answered. */
  private lastTest: { url: string; ok: boolean } | null = null;

  constructor(private readonly model: SandboxModel) {
    super();
    this.id = 'gitpilot-sandbox-settings';
    this.title.label = trans.__('Sandbox Settings');
    this.title.closable = true;
    this.addClass('jp-gitpilot-panel');
    this.lifecycle = new LifecycleCard(
      model.client,
      () => void model.refresh()
    );

    const header = el('div', 'jp-gitpilot-header');
    header.append(el('h2', '', trans.__('Sandbox')), this.badge);
    const body = el('div', 'jp-gitpilot-panel-body');
    this.node.appendChild(body);
    body.append(
      header,
      this.health,
      this.backendChoice(),
      this.matrixlabCard(),
      this.limits()
    );

    const actions = el('div', 'jp-gitpilot-buttons');
    this.saveButton.type = 'button';
    this.saveButton.addEventListener('click', () => void this.save());
    actions.appendChild(this.saveButton);
    this.message.setAttribute('aria-live', 'polite');
    body.append(actions, this.message, this.lifecycle.node);
    model.changed.connect(this.showStatus, this);
  }

  private backendChoice(): HTMLElement {
    const group = el('fieldset', 'jp-gitpilot-card');
    group.setAttribute('role', 'radiogroup');
    group.appendChild(el('legend', '', trans.__('Where snippets run')));
    for (const { name, label, help } of BACKENDS) {
      const radio = input('radio', 'backend');
      radio.value = name;
      radio.classList.remove('jp-mod-styled');
      this.radios.push(radio);
      const option = el('label', 'jp-gitpilot-radio');
      option.append(
        radio,
        el('strong', '', ` ${trans.__(label)}`),
        el('span', 'jp-gitpilot-muted', ` — ${trans.__(help)}`)
      );
      group.appendChild(option);
    }
    return group;
  }

  private matrixlabCard(): HTMLElement {
    const card = el('fieldset', 'jp-gitpilot-card');
    card.appendChild(el('legend', '', trans.__('MatrixLab connection')));
    this.url.placeholder = DEFAULTS.matrixlab_url;
    this.token.autocomplete = 'off';
    this.token.addEventListener('input', () => (this.tokenCleared = false));
    this.clearToken.type = 'button';
    this.clearToken.addEventListener('click', () => {
      this.tokenCleared = true;
      this.token.value = '';
      this.token.placeholder = trans.__('cleared on Save');
    });
    const tokenRow = el('div', 'jp-gitpilot-inline');
    tokenRow.append(this.token, this.clearToken);
    this.image.placeholder = trans.__("the Runner's default for the language");
    const test = el('button', 'jp-mod-styled', trans.__('Test connection'));
    test.type = 'button';
    test.addEventListener('click', () => void this.test(test));
    this.report.setAttribute('aria-live', 'polite');
    card.append(
      field(trans.__('Runner URL'), this.url),
      field(trans.__('Bearer token'), tokenRow, trans.__(TOKEN_NOTE)),
      field(trans.__('Default image'), this.image),
      test,
      this.report
    );
    return card;
  }

  private limits(): HTMLElement {
    const card = el('fieldset', 'jp-gitpilot-card');
    card.appendChild(el('legend', '', trans.__('Limits (every backend)')));
    this.network.classList.remove('jp-mod-styled');
    const egress = el('label', 'jp-gitpilot-radio');
    egress.append(
      this.network,
      el('span', '', ` ${trans.__('Allow network egress')}`)
    );
    const limit = el('label', 'jp-gitpilot-field');
    limit.append(this.timeoutLabel, this.timeout);
    // Outside the label: the message describes the field, it is not its name.
    this.timeoutError.id = 'jp-gitpilot-timeout-error';
    this.timeoutError.hidden = true;
    this.timeoutError.setAttribute('role', 'alert');
    this.timeout.setAttribute('aria-describedby', this.timeoutError.id);
    this.timeout.addEventListener('input', () => this.checkTimeout());
    this.showTimeoutRange();
    card.append(egress, limit, this.timeoutError);
    return card;
  }

  /** The time limit's bounds on the field and in its label. */
  private showTimeoutRange(): void {
    const { minimum, maximum } = this.timeoutRange;
    this.timeout.min = String(minimum);
    this.timeout.max = String(maximum);
    this.timeoutLabel.textContent = trans.__(
      'Time limit (seconds, %1–%2)',
      minimum,
      maximum
    );
  }

  /** Mark a time limit out of bounds (with why) and keep Save off until it is fixed. */
  private checkTimeout(): boolean {
    const problem = timeoutProblem(this.timeout.value, this.timeoutRange);
    if (problem) {
      this.timeout.setAttribute('aria-invalid', 'true');
    } else {
      this.timeout.removeAttribute('aria-invalid');
    }
    this.timeoutError.textContent = problem ?? '';
    this.timeoutError.hidden = !problem;
    this.saveButton.disabled = !!problem;
    return !problem;
  }

  /** Fill the form from the server (on open and after Save); never shows a token. */
  async load(): Promise<void> {
    await this.model.refresh();
    const status = this.model.status;
    if (status) {
      this.fill(status);
    }
    await this.lifecycle.load();
  }

  private fill(status: IStatus): void {
    const s = status.settings;
    this.allowed = status.allowed_backends ?? null;
    for (const radio of this.radios) {
      // Set by the administrator: a backend it does not allow cannot be chosen here.
      const refused = !this.isAllowed(radio.value);
      radio.disabled = refused && radio.value !== s.backend;
      radio.parentElement?.setAttribute(
        'title',
        refused
          ? trans.__('Set by the administrator: not allowed on this server.')
          : ''
      );
    }
    this.checkBackend(s.backend);
    this.url.value = s.matrixlab_url ?? '';
    this.image.value = s.matrixlab_image ?? '';
    this.network.checked = !!s.allow_network;
    this.timeoutRange = {
      minimum: DEFAULTS.timeout_sec.minimum,
      maximum: status.max_timeout_sec ?? DEFAULTS.timeout_sec.maximum
    };
    this.showTimeoutRange();
    this.timeout.value = String(s.timeout_sec);
    this.checkTimeout();
    this.token.value = '';
    this.tokenCleared = false;
    this.token.placeholder = status.has_token
      ? SAVED_TOKEN
      : trans.__('not set');
    this.clearToken.disabled = !status.has_token;
    this.saved = this.formValues();
  }

  /** Whether the administrator allows `backend` (unknown until the first status: yes). */
  private isAllowed(backend: string): boolean {
    return this.allowed === null || this.allowed.includes(backend);
  }

  private checkBackend(backend: string): void {
    for (const radio of this.radios) {
      radio.checked = radio.value === backend;
    }
    this.filledBackend = backend;
  }

  private showStatus(): void {
    const { status, error } = this.model;
    // A change made elsewhere (palette, another tab) moves the radio unless the user already did.
    const chosen = this.radios.find(r => r.checked)?.value ?? '';
    if (
      status &&
      status.settings.backend !== this.filledBackend &&
      chosen === this.filledBackend
    ) {
      this.checkBackend(status.settings.backend);
      if (this.saved) {
        this.saved.backend = status.settings.backend;
      }
    }
    const text = statusText(status, error);
    this.health.textContent = status?.error ? `${text}: ${status.error}` : text;
    this.health.classList.toggle('jp-mod-failed', !!error || !status?.ok);
    const override = status?.env_override;
    this.badge.hidden = !override;
    this.badge.textContent = override
      ? trans.__('set by the environment: %1', override)
      : '';
    this.badge.title = override
      ? trans.__(
          "%1 is set in the server's environment and wins over the saved choice (now %2).",
          override,
          backendLabel(status?.backend)
        )
      : '';
  }

  private formValues(): FormValues {
    return {
      backend: this.radios.find(r => r.checked)?.value ?? this.filledBackend,
      matrixlab_url: this.url.value.trim(),
      matrixlab_image: this.image.value.trim(),
      allow_network: this.network.checked,
      timeout_sec: Number(this.timeout.value)
    };
  }

  /** The form's changes: only fields that differ from the saved ones; the token when typed or cleared. */
  changes(): SettingsUpdate {
    const changes = changedFields(this.saved, this.formValues());
    if (!changes.backend) {
      delete changes.backend;
    }
    if (this.token.value) {
      changes.matrixlab_token = this.token.value;
    } else if (this.tokenCleared) {
      changes.matrixlab_token = '';
    }
    return changes;
  }

  private say(text: string, failed: boolean): void {
    this.message.textContent = text;
    this.message.classList.toggle('jp-gitpilot-error', failed);
    this.message.setAttribute('role', failed ? 'alert' : 'status');
  }

  /** True when the user still wants to save MatrixLab after its test said "Not reachable". */
  private async confirmUnreachable(changes: SettingsUpdate): Promise<boolean> {
    const backend = changes.backend ?? this.saved?.backend;
    const url = this.url.value.trim();
    if (
      backend !== 'matrixlab' ||
      !this.lastTest ||
      this.lastTest.ok ||
      this.lastTest.url !== url
    ) {
      return true;
    }
    const where = url || trans.__('the default URL');
    const blocker = this.lifecycle.startBlocker;
    const dialog = new Dialog({
      title: trans.__('Save an unreachable MatrixLab?'),
      // "The card below can" only when its Start button works; else why it cannot.
      body:
        blocker === null
          ? trans.__(
              'The Runner at %1 did not answer the connection test a moment ago. If you save MatrixLab now, every snippet fails until the Runner answers. Start it first (the card below can), or keep the current backend.',
              where
            )
          : trans.__(
              'The Runner at %1 did not answer the connection test a moment ago. If you save MatrixLab now, every snippet fails until the Runner answers. Start it first (the card below cannot: %2), or keep the current backend.',
              where,
              blocker
            ),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Save anyway') })
      ],
      defaultButton: 0
    });
    return (await launchTrapped(dialog)).button.accept;
  }

  private async save(): Promise<void> {
    if (!this.checkTimeout()) {
      return; // Save is off meanwhile; the field says why
    }
    const changes = this.changes();
    if (Object.keys(changes).length === 0) {
      this.say(trans.__('Nothing changed: nothing to save.'), false);
      return;
    }
    // Off where it is not allowed is refused by the server with how to allow it: no question.
    const off = changes.backend === 'off' && this.isAllowed('off');
    if (off && !(await confirmPassThrough())) {
      this.say(trans.__('Not saved: the backend stays as it was.'), false);
      return;
    }
    if (!(await this.confirmUnreachable(changes))) {
      this.say(trans.__('Not saved.'), false);
      return;
    }
    try {
      const status = await this.model.client.configure(changes, off);
      this.model.set(status);
      this.fill(status);
      const outcome = saveOutcome(status, changes.backend);
      // Saved either way: the line stays a status, the toast carries the warning.
      this.say(
        outcome.type === 'success'
          ? trans.__('Saved. %1.', statusText(status, null))
          : outcome.message,
        false
      );
      Notification.emit(outcome.message, outcome.type, { autoClose: 6000 });
    } catch (error) {
      this.say(error instanceof Error ? error.message : String(error), true);
    }
  }

  private async test(button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    this.report.replaceChildren(
      el('span', 'jp-gitpilot-muted', trans.__('Testing…'))
    );
    const options: { matrixlab_url?: string; matrixlab_token?: string } = {};
    const url = this.url.value.trim();
    if (url) {
      options.matrixlab_url = url;
    }
    if (this.token.value) {
      options.matrixlab_token = this.token.value;
    }
    try {
      const report = await this.model.client.testConnection(options);
      this.lastTest = { url, ok: !!report.ok };
      const line = el(
        'div',
        report.ok ? 'jp-mod-ok' : 'jp-mod-failed',
        describeReport(report)
      );
      this.report.replaceChildren(line);
      const hint = report.hint || (report.ok ? '' : report.error);
      if (hint) {
        this.report.appendChild(el('div', 'jp-gitpilot-hint', String(hint)));
      }
    } catch (error) {
      this.lastTest = { url, ok: false };
      this.report.replaceChildren(
        el(
          'div',
          'jp-gitpilot-error',
          error instanceof Error ? error.message : String(error)
        )
      );
    } finally {
      button.disabled = false;
    }
  }

  dispose(): void {
    this.model.changed.disconnect(this.showStatus, this);
    super.dispose();
  }
}
