/**
 * The Settings Editor's "Sandbox" page holds the real settings: the ones the Jupyter
 * server keeps (`GET/PUT /api/sandbox/config`, shared with the kernel, CLI and agents).
 *
 * The server is the authority. Its values are mirrored into the page whenever the
 * status changes; an edit made on the page is sent to the server (only the fields
 * that differ), after the same confirmation as elsewhere for Pass-through. A refused
 * edit is put back to the server's value and the server's message is shown.
 */

import { Notification } from '@jupyterlab/apputils';
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import { messageOf } from './flow';
import { trans } from './i18n';
import type { SandboxModel } from './model';
import type { IMaskedSettings, SettingsUpdate } from './types';

/** The server-side settings the page shows (the token is never among them). */
export const SERVER_KEYS = [
  'backend',
  'timeout_sec',
  'allow_network',
  'matrixlab_url',
  'matrixlab_image'
] as const;

type ServerKey = (typeof SERVER_KEYS)[number];

/** The server's value of each key, as the page stores it. */
export function serverValues(
  settings: IMaskedSettings
): Record<ServerKey, string | number | boolean> {
  return {
    backend: settings.backend,
    timeout_sec: settings.timeout_sec,
    allow_network: !!settings.allow_network,
    matrixlab_url: settings.matrixlab_url ?? '',
    matrixlab_image: settings.matrixlab_image ?? ''
  };
}

/** The keys whose page value differs from the server's (what an edit changed). */
export function editedKeys(
  page: Partial<Record<ServerKey, unknown>>,
  server: IMaskedSettings
): SettingsUpdate {
  const values = serverValues(server);
  const changes: Record<string, unknown> = {};
  for (const key of SERVER_KEYS) {
    const value = page[key];
    if (value !== undefined && value !== null && value !== values[key]) {
      changes[key] = value;
    }
  }
  return changes as SettingsUpdate;
}

/** Keeps the Settings Editor's page and the server's settings in step. */
export class SettingsSync {
  private mirroring = false;
  private sending = false;

  constructor(
    private readonly settings: ISettingRegistry.ISettings,
    private readonly model: SandboxModel,
    private readonly confirmOff: () => Promise<boolean>
  ) {
    model.changed.connect(() => void this.mirror());
    settings.changed.connect(() => void this.send());
    void this.mirror();
  }

  private pageValues(): Partial<Record<ServerKey, unknown>> {
    const page: Partial<Record<ServerKey, unknown>> = {};
    for (const key of SERVER_KEYS) {
      page[key] = this.settings.get(key).composite;
    }
    return page;
  }

  /** Write the server's values into the page where they differ (one save). */
  private async mirror(): Promise<void> {
    const status = this.model.status;
    if (!status || this.mirroring || this.sending) {
      return;
    }
    const values = serverValues(status.settings);
    const page = this.pageValues();
    if (SERVER_KEYS.every(key => page[key] === values[key])) {
      return;
    }
    this.mirroring = true;
    try {
      const user = { ...(this.settings.user as Record<string, unknown>) };
      await this.settings.save(JSON.stringify({ ...user, ...values }, null, 2));
    } catch {
      // The page could not be written (a read-only settings dir): it only lags behind.
    } finally {
      this.mirroring = false;
    }
  }

  /** The user edited the page: send what differs from the server's settings. */
  private async send(): Promise<void> {
    const status = this.model.status;
    if (!status || this.mirroring || this.sending) {
      return;
    }
    const changes = editedKeys(this.pageValues(), status.settings);
    if (Object.keys(changes).length === 0) {
      return;
    }
    this.sending = true;
    try {
      // Not allowed by the administrator: no question, the server's refusal says how to allow it.
      const allowed = status.allowed_backends ?? null;
      const off =
        changes.backend === 'off' &&
        (allowed === null || allowed.includes('off'));
      if (off && !(await this.confirmOff())) {
        return; // `finally` puts the page back to the server's value
      }
      const next = await this.model.client.configure(changes, off);
      this.model.set(next);
      Notification.success(trans.__('Sandbox settings saved.'), {
        autoClose: 4000
      });
    } catch (error) {
      Notification.error(
        trans.__('Sandbox settings not saved: %1', messageOf(error)),
        { autoClose: false }
      );
    } finally {
      this.sending = false;
      await this.mirror();
    }
  }
}
