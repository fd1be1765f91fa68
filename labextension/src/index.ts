/**
 * gitpilot-jupyter for JupyterLab: the sandbox without a kernel, over `/api/sandbox/*`.
 *
 * Wires the settings panel, the status bar item, ▶ Run on Markdown code blocks,
 * "Run in Sandbox" for files, and their palette commands.
 */

import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, showErrorMessage } from '@jupyterlab/apputils';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import {
  IRenderMimeRegistry,
  RenderedMarkdown,
  markdownRendererFactory
} from '@jupyterlab/rendermime';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { runIcon, settingsIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { blockAround, decorateCodeBlocks, ICodeBlock } from './codeblocks';
import { messageOf, planAndRun } from './flow';
import { BACKENDS, fileLanguage } from './labels';
import { SandboxModel } from './model';
import { SandboxPanel } from './panel';
import { OutputView } from './render';
import { SandboxClient } from './request';
import { SandboxStatusItem } from './statusbar';

const PLUGIN_ID = 'gitpilot-jupyter:plugin';

/** Command ids (the palette, menus and keyboard all go through these). */
export const CommandIDs = {
  openSettings: 'gitpilot-sandbox:open-settings',
  refresh: 'gitpilot-sandbox:refresh-status',
  useBackend: 'gitpilot-sandbox:use-backend',
  runFile: 'gitpilot-sandbox:run-file',
  runCodeBlock: 'gitpilot-sandbox:run-code-block'
};

const CATEGORY = 'Sandbox';

function runCodeBlock(client: SandboxClient, block: ICodeBlock): void {
  void planAndRun(
    client,
    { language: block.language, code: block.code, source: 'code_block' },
    () => {
      const view = new OutputView();
      block.outputHost.replaceChildren(view.node);
      return view;
    }
  );
}

/** Replace the Markdown renderer by one that adds ▶ Run buttons after rendering. */
function addRunButtons(rendermime: IRenderMimeRegistry, client: SandboxClient): void {
  class RunnableMarkdown extends RenderedMarkdown {
    async render(model: Parameters<RenderedMarkdown['render']>[0]): Promise<void> {
      await super.render(model);
      decorateCodeBlocks(this.node, block => runCodeBlock(client, block));
    }
  }
  rendermime.addFactory(
    { ...markdownRendererFactory, createRenderer: options => new RunnableMarkdown(options) },
    markdownRendererFactory.defaultRank
  );
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Sandbox settings panel, status bar item, and Run buttons for code blocks and files.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [ICommandPalette, IStatusBar, IFileBrowserFactory, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    browsers: IFileBrowserFactory | null,
    settingRegistry: ISettingRegistry | null
  ) => {
    const serverSettings = app.serviceManager.serverSettings ?? ServerConnection.makeSettings();
    const client = new SandboxClient(serverSettings.baseUrl, (url, init) =>
      ServerConnection.makeRequest(url, init, serverSettings)
    );
    const model = new SandboxModel(client);
    addRunButtons(rendermime, client);

    let panel: SandboxPanel | null = null;
    app.commands.addCommand(CommandIDs.openSettings, {
      label: 'Sandbox Settings…',
      icon: args => (args.isPalette ? undefined : settingsIcon),
      caption: 'Choose where snippets run and set up MatrixLab',
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

    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Sandbox Status',
      execute: () => model.refresh()
    });

    app.commands.addCommand(CommandIDs.useBackend, {
      label: args => {
        const name = String(args.backend ?? '');
        const label = BACKENDS.find(b => b.name === name)?.label ?? name;
        return `Use ${label} Sandbox`;
      },
      isToggled: args => model.status?.settings.backend === args.backend,
      execute: async args => {
        try {
          model.set(await client.configure({ backend: String(args.backend) }));
        } catch (error) {
          await showErrorMessage('Sandbox', messageOf(error));
        }
      }
    });

    app.commands.addCommand(CommandIDs.runCodeBlock, {
      label: 'Run Code Block in Sandbox',
      caption: 'Plan and run the Markdown code block that has the focus or the selection',
      isEnabled: () => focusedRunButton() !== null,
      execute: () => focusedRunButton()?.click()
    });

    app.commands.addCommand(CommandIDs.runFile, {
      label: 'Run in Sandbox',
      icon: args => (args.isPalette ? undefined : runIcon),
      caption: 'Plan this file, approve it, and run it in the sandbox',
      isVisible: () => selectedRunnableFile(browsers) !== null,
      execute: () => {
        const path = selectedRunnableFile(browsers);
        if (path) {
          return runFile(app, client, path);
        }
      }
    });

    if (palette) {
      palette.addItem({ command: CommandIDs.openSettings, category: CATEGORY });
      palette.addItem({ command: CommandIDs.refresh, category: CATEGORY });
      palette.addItem({ command: CommandIDs.runCodeBlock, category: CATEGORY });
      for (const { name } of BACKENDS) {
        palette.addItem({ command: CommandIDs.useBackend, category: CATEGORY, args: { backend: name } });
      }
    }

    if (statusBar) {
      const item = new SandboxStatusItem(model, () => {
        void app.commands.execute(CommandIDs.openSettings);
      });
      statusBar.registerStatusItem(PLUGIN_ID + ':status', {
        item,
        align: 'left',
        rank: 100,
        isActive: () => true
      });
    }

    const startPolling = (seconds: number) => model.poll(seconds);
    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = () => startPolling(Number(settings.get('refreshInterval').composite));
          apply();
          settings.changed.connect(apply);
        })
        .catch(() => startPolling(30));
    } else {
      startPolling(30);
    }
    void model.refresh();
  }
};

/** The code block the user last put the focus or the selection in (the palette takes the focus). */
let lastBlock: HTMLElement | null = null;

function rememberBlock(node: Node | null): void {
  lastBlock = blockAround(node) ?? lastBlock;
}

document.addEventListener('focusin', event => rememberBlock(event.target as Node));
// Capture phase: a notebook cell may stop a click from selecting text in its Markdown.
document.addEventListener('pointerdown', event => rememberBlock(event.target as Node), true);
document.addEventListener('selectionchange', () =>
  rememberBlock(window.getSelection()?.anchorNode ?? null)
);

/** The ▶ Run button of the code block holding the focus or the selection, or held last. */
function focusedRunButton(): HTMLButtonElement | null {
  const around =
    blockAround(document.activeElement) ??
    blockAround(window.getSelection()?.anchorNode ?? null) ??
    (lastBlock?.isConnected ? lastBlock : null);
  return around as HTMLButtonElement | null;
}

/** The path of the file browser's selected `.py` / `.js` / `.sh` file, or null. */
function selectedRunnableFile(browsers: IFileBrowserFactory | null): string | null {
  const browser = browsers?.tracker.currentWidget;
  const item = browser?.selectedItems().next();
  if (!item || item.done || item.value.type === 'directory') {
    return null;
  }
  return fileLanguage(item.value.path) ? item.value.path : null;
}

/** Plan a file (the server reads it), and show the run in its own tab. */
async function runFile(app: JupyterFrontEnd, client: SandboxClient, path: string): Promise<void> {
  const name = path.split('/').pop() ?? path;
  await planAndRun(client, { file: path, source: 'file_run' }, () => {
    const view = new OutputView(path);
    const content = new Widget();
    content.addClass('jp-gitpilot-run-content');
    content.node.appendChild(view.node);
    const widget = new MainAreaWidget({ content });
    widget.id = `gitpilot-run-${Date.now()}`;
    widget.title.label = `▶ ${name}`;
    widget.title.closable = true;
    widget.addClass('jp-gitpilot-run-tab');
    app.shell.add(widget, 'main', { mode: 'split-bottom' });
    app.shell.activateById(widget.id);
    return view;
  });
}

export default plugin;
