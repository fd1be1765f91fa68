/**
 * The status bar item: "Sandbox: Local", "Sandbox: MatrixLab — unreachable"; a click opens the panel.
 */

import { Widget } from '@lumino/widgets';

import { statusText, statusTitle } from './labels';
import type { SandboxModel } from './model';

/** A keyboard-focusable status bar item bound to the shared model. */
export class SandboxStatusItem extends Widget {
  constructor(
    private readonly model: SandboxModel,
    private readonly open: () => void
  ) {
    super();
    this.addClass('jp-gitpilot-status');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', () => this.open());
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        this.open();
      }
    });
    model.changed.connect(this.update, this);
    this.update();
  }

  /** Show the model's current text and health. */
  update(): void {
    const { status, error } = this.model;
    this.node.textContent = statusText(status, error);
    this.node.title = statusTitle(status, error);
    const healthy = error === null && status !== null && status.ok;
    this.node.classList.toggle('jp-mod-failed', status !== null && !healthy);
  }

  dispose(): void {
    this.model.changed.disconnect(this.update, this);
    super.dispose();
  }
}
