/**
 * gitpilot-jupyter for JupyterLab: the sandbox without a kernel, over `/api/sandbox/*`.
 *
 * Wires the settings panel, the Pending Plans panel, the status bar item, ▶ Run on
 * Markdown code blocks, "Run in Sandbox" for files, and their palette commands.
 */

import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  Notification,
  showErrorMessage
} from '@jupyterlab/apputils';
import {
  IDefaultFileBrowser,
  IFileBrowserFactory
} from '@jupyterlab/filebrowser';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import {
  IRunningSessionManagers,
  IRunningSessionSidebar
} from '@jupyterlab/running';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';
import {
  listIcon,
  runIcon,
  runningIcon,
  settingsIcon
} from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { DEFAULTS } from './defaults';
import { confirmPassThrough } from './dialog';
import { runFile, selectedRunnableFile } from './filerun';
import { workspaceFilePicker } from './filepicker';
import { messageOf } from './flow';
import { trans, useTranslator } from './i18n';
import { backendLabel, BACKENDS, saveOutcome } from './labels';
import { addRunButtons, CodeBlockFocus } from './markdown';
import { SandboxModel } from './model';
import { SandboxPanel } from './panel';
import { PendingPlansPanel } from './pending';
import { SandboxClient } from './request';
import { RESTART_SELECTOR, sessionsRunningManager } from './running';
import { SessionsModel, SessionsPanel } from './sessions';
import { SettingsSync } from './settingsync';
import { SandboxStatusItem } from './statusbar';

const PLUGIN_ID = 'gitpilot-jupyter:plugin';

/** Command ids (the palette, menus and keyboard all go through these). */
export const CommandIDs = {
  openSettings: 'gitpilot-sandbox:open-settings',
  pendingPlans: 'gitpilot-sandbox:pending-plans',
  refresh: 'gitpilot-sandbox:refresh-status',
  useBackend: 'gitpilot-sandbox:use-backend',
  runFile: 'gitpilot-sandbox:run-file',
  sessions: 'gitpilot-sandbox:sessions',
  restartSession: 'gitpilot-sandbox:restart-session',
  runCodeBlock: 'gitpilot-sandbox:run-code-block'
};

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'Sandbox settings panel, status bar item, and Run buttons for code blocks and files.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [
    ICommandPalette,
    IStatusBar,
    IFileBrowserFactory,
    ISettingRegistry,
    ITranslator,
    IDefaultFileBrowser,
    IRunningSessionManagers,
    IRunningSessionSidebar
  ],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    browsers: IFileBrowserFactory | null,
    settingRegistry: ISettingRegistry | null,
    translator: ITranslator | null,
    defaultBrowser: IDefaultFileBrowser | null,
    runningManagers: IRunningSessionManagers | null,
    runningSidebar: IRunningSessionSidebar | null
  ) => {
    useTranslator(translator);
    const category = trans.__('Sandbox');
    const serverSettings =
      app.serviceManager.serverSettings ?? ServerConnection.makeSettings();
    const client = new SandboxClient(serverSettings.baseUrl, (url, init) =>
      ServerConnection.makeRequest(url, init, serverSettings)
    );
    const model = new SandboxModel(client);
    // Files… in the approval dialog browses the workspace with the lab's file dialog.
    const pickFiles = () => {
      const manager =
        defaultBrowser?.model.manager ??
        browsers?.tracker.currentWidget?.model.manager;
      return manager ? workspaceFilePicker(manager, translator) : null;
    };
    const renderDisplay = addRunButtons(
      rendermime,
      client,
      undefined,
      pickFiles
    );
    const blockFocus = new CodeBlockFocus();
    blockFocus.track();

    let panel: SandboxPanel | null = null;
    app.commands.addCommand(CommandIDs.openSettings, {
      label: trans.__('Sandbox Settings…'),
      icon: args => (args.isPalette ? undefined : settingsIcon),
      caption: trans.__('Choose where snippets run and set up MatrixLab'),
      execute: () => {
        if (!panel || panel.isDisposed) {
          panel = new SandboxPanel(model);
          panel.title.icon = settingsIcon;
        }
        if (!panel.isAttached) {
          app.shell.add(panel, 'main');
        }
        app.shell.activateById(panel.id);
        return panel.load();
      }
    });

    let pending: PendingPlansPanel | null = null;
    app.commands.addCommand(CommandIDs.pendingPlans, {
      label: trans.__('Sandbox: Pending Plans'),
      icon: args => (args.isPalette ? undefined : listIcon),
      caption: trans.__('Approve or reject the plans agents made in ask mode'),
      execute: () => {
        if (!pending || pending.isDisposed) {
          pending = new PendingPlansPanel(model);
          pending.title.icon = listIcon;
        }
        if (!pending.isAttached) {
          app.shell.add(pending, 'main');
        }
        app.shell.activateById(pending.id);
        return pending.refresh();
      }
    });

    // Sandbox sessions: one model behind JupyterLab's Running panel and our own tab
    // (the tab adds each session's facts and a Restart button).
    const sessionModel = new SessionsModel(client);
    const sessions = new SessionsPanel(sessionModel);
    sessions.title.icon = runningIcon;
    app.shell.add(sessions, 'left', { rank: 210 });
    const showSessions = (name?: string) => {
      app.shell.activateById(sessions.id);
      void sessions.refresh().then(() => {
        if (name) {
          sessions.node
            .querySelector<HTMLButtonElement>(
              `[data-name="${CSS.escape(name)}"] button`
            )
            ?.focus();
        }
      });
    };
    app.commands.addCommand(CommandIDs.sessions, {
      label: trans.__('Sandbox: Sessions'),
      caption: trans.__(
        'List your sandbox sessions, with Restart and Stop for each'
      ),
      execute: () => showSessions()
    });
    if (runningManagers) {
      runningManagers.add(
        sessionsRunningManager(sessionModel, {
          icon: runningIcon,
          open: showSessions,
          failed: message =>
            void showErrorMessage(
              trans.__('The sandbox session was not stopped'),
              message
            )
        })
      );
      // The Running panel fetches nothing itself: poll while it is shown.
      sessionModel.watch(
        () => runningSidebar instanceof Widget && runningSidebar.isVisible
      );
      void sessionModel.refresh();
    }
    app.commands.addCommand(CommandIDs.restartSession, {
      label: trans.__('Restart Sandbox Session'),
      caption: trans.__('Restart this session: its variables are lost'),
      execute: async args => {
        const name =
          typeof args.name === 'string'
            ? args.name
            : app.contextMenuHitTest(node => node.matches(RESTART_SELECTOR))
                ?.dataset.context;
        if (!name) {
          return;
        }
        try {
          await sessionModel.restart(name);
          Notification.success(
            trans.__('Session %1 restarted: its state is gone.', name),
            { autoClose: 5000 }
          );
        } catch (error) {
          await showErrorMessage(
            trans.__('The sandbox session was not restarted'),
            messageOf(error)
          );
        }
      }
    });
    app.contextMenu.addItem({
      command: CommandIDs.restartSession,
      selector: RESTART_SELECTOR,
      rank: 0
    });

    app.commands.addCommand(CommandIDs.refresh, {
      label: trans.__('Refresh Sandbox Status'),
      execute: () => model.refresh()
    });

    app.commands.addCommand(CommandIDs.useBackend, {
      label: args =>
        trans.__('Use %1 Sandbox', backendLabel(String(args.backend ?? ''))),
      isToggled: args => model.status?.settings.backend === args.backend,
      execute: async args => {
        const backend = String(args.backend);
        if (model.status?.settings.backend === backend) {
          return;
        }
        // Pass-through has no isolation: one click must never switch to it.
        const off = backend === 'off';
        if (off && !(await confirmPassThrough())) {
          return;
        }
        try {
          const status = await client.configure({ backend }, off);
          model.set(status);
          // The panel's kind: Pass-through (or an override, an outage) is no success.
          const outcome = saveOutcome(status, backend);
          Notification.emit(
            outcome.type === 'success'
              ? trans.__('Snippets now run in: %1.', backendLabel(backend))
              : outcome.message,
            outcome.type,
            { autoClose: 6000 }
          );
        } catch (error) {
          await showErrorMessage(
            trans.__('The sandbox setting was not changed'),
            messageOf(error)
          );
        }
      }
    });

    app.commands.addCommand(CommandIDs.runCodeBlock, {
      label: trans.__('Run Code Block in Sandbox'),
      caption: trans.__(
        'Plan and run the Markdown code block that has the focus or the selection'
      ),
      isEnabled: () => blockFocus.current() !== null,
      execute: () => blockFocus.current()?.click()
    });

    app.commands.addCommand(CommandIDs.runFile, {
      label: trans.__('Run in Sandbox'),
      icon: args => (args.isPalette ? undefined : runIcon),
      caption: trans.__(
        'Plan this file, approve it, and run it in the sandbox'
      ),
      isVisible: () => selectedRunnableFile(browsers) !== null,
      execute: () => {
        const path = selectedRunnableFile(browsers);
        if (path) {
          return runFile(app, client, path, renderDisplay, pickFiles());
        }
      }
    });

    if (palette) {
      palette.addItem({ command: CommandIDs.openSettings, category });
      palette.addItem({ command: CommandIDs.pendingPlans, category });
      palette.addItem({ command: CommandIDs.sessions, category });
      palette.addItem({ command: CommandIDs.refresh, category });
      palette.addItem({ command: CommandIDs.runCodeBlock, category });
      for (const { name } of BACKENDS) {
        palette.addItem({
          command: CommandIDs.useBackend,
          category,
          args: { backend: name }
        });
      }
    }

    if (statusBar) {
      const item = new SandboxStatusItem(
        model,
        () => void app.commands.execute(CommandIDs.openSettings),
        () => void app.commands.execute(CommandIDs.pendingPlans)
      );
      statusBar.registerStatusItem(PLUGIN_ID + ':status', {
        item,
        align: 'left',
        rank: 100,
        isActive: () => true
      });
    }

    // Agent plans wait for a person: say so when new ones arrive, wherever the user is.
    model.newPlans.connect((_, plans) => {
      Notification.warning(
        trans._n(
          '%1 new agent plan waits for your approval.',
          '%1 new agent plans wait for your approval.',
          plans.length
        ),
        {
          autoClose: false,
          actions: [
            {
              label: trans.__('Open Pending Plans'),
              caption: trans.__('Approve or reject the plans agents made'),
              callback: () => void app.commands.execute(CommandIDs.pendingPlans)
            }
          ]
        }
      );
    });

    const startPolling = (seconds: number) => model.poll(seconds);
    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = () =>
            startPolling(Number(settings.get('refreshInterval').composite));
          apply();
          settings.changed.connect(apply);
          // The Settings Editor's Sandbox page shows and edits the server's settings.
          new SettingsSync(settings, model, confirmPassThrough);
        })
        .catch(() => startPolling(DEFAULTS.refreshInterval));
    } else {
      startPolling(DEFAULTS.refreshInterval);
    }
    void model.refresh();
  }
};

export default plugin;
