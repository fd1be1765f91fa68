/**
 * The sandbox settings panel: backend, MatrixLab connection, limits, Save, Test, lifecycle.
 *
 * The token field is write-only: the server only says `has_token`, so a saved token
 * shows as bullets; typing replaces it, Clear removes it.
 */

import { Widget } from '@lumino/widgets';

import { BACKENDS, backendLabel, statusText, TOKEN_NOTE } from './labels';
import { LifecycleCard } from './lifecycle';
import type { SandboxModel } from './model';
import { el } from './render';
import type { IConnectionReport, IStatus, SettingsUpdate } from './types';

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
      ? 'Connected'
      : report.reachable === false
        ? 'Not reachable'
        : 'Problem'
  ];
  if (typeof report.latency_ms === 'number') {
    parts.push(`${Math.round(report.latency_ms)} ms`);
  }
  if (report.version) {
    parts.push(`Runner ${report.version}`);
  }
  if (report.docker_ok === true) {
    parts.push('Docker OK');
  } else if (report.docker_ok === false) {
    parts.push('Docker down');
  }
  return parts.join(' · ');
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
  private readonly clearToken = el('button', 'jp-mod-styled', 'Clear');
  private readonly image = input('text', 'matrixlab_image');
  private readonly network = input('checkbox', 'allow_network');
  private readonly timeout = input('number', 'timeout_sec');
  private readonly message = el('div', 'jp-gitpilot-message');
  private readonly report = el('div', 'jp-gitpilot-report');
  private readonly lifecycle: LifecycleCard;
  private tokenCleared = false;
  private filledBackend = '';

  constructor(private readonly model: SandboxModel) {
    super();
    this.id = 'gitpilot-sandbox-settings';
    this.title.label = 'Sandbox Settings';
    this.title.closable = true;
    this.addClass('jp-gitpilot-panel');
    this.lifecycle = new LifecycleCard(
      model.client,
      () => void model.refresh()
    );

    const header = el('div', 'jp-gitpilot-header');
    header.append(el('h2', '', 'Sandbox'), this.badge);
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
    const save = el('button', 'jp-mod-styled jp-mod-accept', 'Save');
    save.type = 'button';
    save.addEventListener('click', () => void this.save());
    actions.appendChild(save);
    this.message.setAttribute('aria-live', 'polite');
    body.append(actions, this.message, this.lifecycle.node);
    model.changed.connect(this.showStatus, this);
  }

  private backendChoice(): HTMLElement {
    const group = el('fieldset', 'jp-gitpilot-card');
    group.setAttribute('role', 'radiogroup');
    group.appendChild(el('legend', '', 'Where snippets run'));
    for (const { name, label, help } of BACKENDS) {
      const radio = input('radio', 'backend');
      radio.value = name;
      radio.classList.remove('jp-mod-styled');
      this.radios.push(radio);
      const option = el('label', 'jp-gitpilot-radio');
      option.append(
        radio,
        el('strong', '', ` ${label}`),
        el('span', 'jp-gitpilot-muted', ` — ${help}`)
      );
      group.appendChild(option);
    }
    return group;
  }

  private matrixlabCard(): HTMLElement {
    const card = el('fieldset', 'jp-gitpilot-card');
    card.appendChild(el('legend', '', 'MatrixLab connection'));
    this.url.placeholder = 'http://localhost:8765';
    this.token.autocomplete = 'off';
    this.token.addEventListener('input', () => (this.tokenCleared = false));
    this.clearToken.type = 'button';
    this.clearToken.addEventListener('click', () => {
      this.tokenCleared = true;
      this.token.value = '';
      this.token.placeholder = 'cleared on Save';
    });
    const tokenRow = el('div', 'jp-gitpilot-inline');
    tokenRow.append(this.token, this.clearToken);
    this.image.placeholder = "the Runner's default for the language";
    const test = el('button', 'jp-mod-styled', 'Test connection');
    test.type = 'button';
    test.addEventListener('click', () => void this.test(test));
    this.report.setAttribute('aria-live', 'polite');
    card.append(
      field('Runner URL', this.url),
      field('Bearer token', tokenRow, TOKEN_NOTE),
      field('Default image', this.image),
      test,
      this.report
    );
    return card;
  }

  private limits(): HTMLElement {
    const card = el('fieldset', 'jp-gitpilot-card');
    card.appendChild(el('legend', '', 'Limits (every backend)'));
    this.network.classList.remove('jp-mod-styled');
    const egress = el('label', 'jp-gitpilot-radio');
    egress.append(this.network, el('span', '', ' Allow network egress'));
    this.timeout.min = '1';
    this.timeout.max = '600';
    card.append(egress, field('Timeout (seconds, 1–600)', this.timeout));
    return card;
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
    this.checkBackend(s.backend);
    this.url.value = s.matrixlab_url ?? '';
    this.image.value = s.matrixlab_image ?? '';
    this.network.checked = !!s.allow_network;
    this.timeout.value = String(s.timeout_sec ?? 120);
    this.token.value = '';
    this.tokenCleared = false;
    this.token.placeholder = status.has_token ? SAVED_TOKEN : 'not set';
    this.clearToken.disabled = !status.has_token;
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
    }
    const text = statusText(status, error);
    this.health.textContent = status?.error ? `${text}: ${status.error}` : text;
    this.health.classList.toggle('jp-mod-failed', !!error || !status?.ok);
    const override = status?.env_override;
    this.badge.hidden = !override;
    this.badge.textContent = override ? `env override: ${override}` : '';
    this.badge.title = override
      ? `${override} is set in the server's environment and wins over the saved choice (now ${backendLabel(status?.backend)}).`
      : '';
  }

  /** The form's changes: every field, the token only when typed or cleared. */
  changes(): SettingsUpdate {
    const changes: SettingsUpdate = {
      matrixlab_url: this.url.value.trim(),
      matrixlab_image: this.image.value.trim(),
      allow_network: this.network.checked,
      timeout_sec: Number(this.timeout.value)
    };
    const backend = this.radios.find(r => r.checked)?.value;
    if (backend) {
      changes.backend = backend;
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

  private async save(): Promise<void> {
    try {
      const status = await this.model.client.configure(this.changes());
      this.model.set(status);
      this.fill(status);
      this.say(`Saved. ${statusText(status, null)}.`, false);
    } catch (error) {
      this.say(error instanceof Error ? error.message : String(error), true);
    }
  }

  private async test(button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    this.report.replaceChildren(el('span', 'jp-gitpilot-muted', 'Testing…'));
    const options: { matrixlab_url?: string; matrixlab_token?: string } = {};
    if (this.url.value.trim()) {
      options.matrixlab_url = this.url.value.trim();
    }
    if (this.token.value) {
      options.matrixlab_token = this.token.value;
    }
    try {
      const report = await this.model.client.testConnection(options);
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
