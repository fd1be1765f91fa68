// The Sandbox Sessions panel: the caller's sessions listed, Restart and Stop each, refreshed.

import { agoText, SessionsPanel, sessionFacts } from '../src/sessions';
import type { ISession } from '../src/types';
import { click, flush, scripted } from './support';

function session(name: string, overrides: Partial<ISession> = {}): ISession {
  return {
    name,
    owner: null,
    state: 'idle',
    started_at: 1000,
    last_used: 1000,
    cells: 2,
    network: false,
    memory_mb: 512,
    isolation: ['bubblewrap'],
    ...overrides
  };
}

function button(panel: SessionsPanel, label: string): HTMLButtonElement {
  const node = panel.node.querySelector<HTMLButtonElement>(
    `button[aria-label="${label}"]`
  );
  if (!node) {
    throw new Error(`no button ${label}`);
  }
  return node;
}

describe('session facts', () => {
  it('says how long ago, in minutes then hours', () => {
    expect(agoText(1000, 1030)).toBe('just now');
    expect(agoText(1000, 1000 + 180)).toBe('3 min ago');
    expect(agoText(1000, 1000 + 7200)).toBe('2 hours ago');
  });

  it('says cells, network, memory and last use', () => {
    expect(sessionFacts(session('a'), 1000 + 60)).toBe(
      '2 cells · network blocked · 512 MB memory · used 1 min ago'
    );
  });
});

describe('SessionsPanel', () => {
  it('lists the sessions, or says there are none', async () => {
    let listed = [session('analysis'), session('plots', { state: 'busy' })];
    const { client } = scripted({
      'GET sessions': () => ({ sessions: listed })
    });
    const panel = new SessionsPanel(client);
    await panel.refresh();
    expect(panel.shown).toEqual(['analysis', 'plots']);
    expect(panel.node.textContent).toContain('busy');
    listed = [];
    await panel.refresh();
    expect(panel.shown).toEqual([]);
    expect(panel.node.textContent).toContain('No sandbox sessions');
  });

  it('stops a session by name and lets it go', async () => {
    let listed = [session('analysis')];
    const { client, sent } = scripted({
      'GET sessions': () => ({ sessions: listed }),
      'DELETE sessions/analysis': () => {
        listed = [];
        return { name: 'analysis', stopped: true };
      }
    });
    const panel = new SessionsPanel(client);
    document.body.appendChild(panel.node);
    await panel.refresh();
    const stop = button(
      panel,
      'Stop session analysis (its processes and files go)'
    );
    stop.focus();
    click(stop);
    for (let i = 0; i < 5; i++) {
      await flush();
    }
    expect(sent.map(s => `${s.method} ${s.endpoint}`)).toContain(
      'DELETE sessions/analysis'
    );
    expect(panel.shown).toEqual([]);
    // The focus goes to Refresh, not to <body>.
    expect(document.activeElement?.textContent).toBe('Refresh');
    panel.node.remove();
  });

  it('restarts a session and says its state is gone', async () => {
    const { client, sent } = scripted({
      'GET sessions': { sessions: [session('analysis', { cells: 5 })] },
      'POST sessions/analysis/restart': session('analysis', { cells: 0 })
    });
    const panel = new SessionsPanel(client);
    await panel.refresh();
    click(button(panel, 'Restart session analysis (its variables are lost)'));
    for (let i = 0; i < 5; i++) {
      await flush();
    }
    expect(sent.map(s => `${s.method} ${s.endpoint}`)).toContain(
      'POST sessions/analysis/restart'
    );
    expect(panel.node.textContent).toContain('Restarted: its state is gone.');
  });

  it('shows a failed Stop as the server message and keeps the row', async () => {
    const { client } = scripted({
      'GET sessions': { sessions: [session('analysis')] },
      'DELETE sessions/analysis': [
        500,
        { message: 'the kernel did not answer' }
      ]
    });
    const panel = new SessionsPanel(client);
    await panel.refresh();
    click(button(panel, 'Stop session analysis (its processes and files go)'));
    for (let i = 0; i < 5; i++) {
      await flush();
    }
    expect(panel.shown).toEqual(['analysis']);
    expect(panel.node.querySelector('[role="alert"]')?.textContent).toBe(
      'the kernel did not answer'
    );
  });
});
