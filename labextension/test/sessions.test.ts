// The caller's sessions: one model behind the Sandbox Sessions tab (Restart and Stop each)
// and JupyterLab's Running panel section (Shut Down, Shut Down All).

import { sessionsRunningManager, sessionTooltip } from '../src/running';
import {
  agoText,
  SessionsModel,
  SessionsPanel,
  sessionFacts
} from '../src/sessions';
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
    const panel = new SessionsPanel(new SessionsModel(client));
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
    const panel = new SessionsPanel(new SessionsModel(client));
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
    const panel = new SessionsPanel(new SessionsModel(client));
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
    const panel = new SessionsPanel(new SessionsModel(client));
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

describe('one SessionsModel behind the tab and the Running panel', () => {
  const icon = {} as never;

  it('fetches once for both, however many ask at once', async () => {
    const { client, sent } = scripted({
      'GET sessions': { sessions: [session('analysis')] }
    });
    const model = new SessionsModel(client);
    const panel = new SessionsPanel(model);
    const manager = sessionsRunningManager(model, { icon });
    let redrawn = 0;
    manager.runningChanged.connect(() => (redrawn += 1));
    manager.refreshRunning();
    await panel.refresh();
    expect(sent.filter(s => s.endpoint === 'sessions')).toHaveLength(1);
    expect(redrawn).toBe(1);
    // Both show what the one fetch answered.
    expect(panel.shown).toEqual(['analysis']);
    const items = manager.running({ mode: 'list' });
    expect(items.map(item => item.label())).toEqual(['analysis']);
    expect(items[0].detail?.()).toBe('idle');
    expect(items[0].context).toBe('analysis');
    panel.dispose();
  });

  it('says language, state and idle time on hover', () => {
    const text = sessionTooltip(session('analysis'), 1000 + 180);
    expect(text).toContain('Python session analysis');
    expect(text).toContain('idle, last used 3 min ago');
    expect(text).toContain('2 cells');
    expect(text).toContain('network blocked');
    expect(sessionTooltip(session('plots', { state: 'busy' }), 1000)).toContain(
      'busy: a cell is running'
    );
  });

  it('Shut Down stops that session; the tab lets it go too', async () => {
    let listed = [session('analysis'), session('plots')];
    const { client, sent } = scripted({
      'GET sessions': () => ({ sessions: listed }),
      'DELETE sessions/analysis': () => {
        listed = listed.filter(s => s.name !== 'analysis');
        return { name: 'analysis', stopped: true };
      }
    });
    const model = new SessionsModel(client);
    const panel = new SessionsPanel(model);
    const manager = sessionsRunningManager(model, { icon });
    await model.refresh();
    const [first] = manager.running({ mode: 'list' });
    expect(
      typeof manager.shutdownLabel === 'function'
        ? manager.shutdownLabel(first)
        : ''
    ).toBe('Shut Down session analysis (its processes and files go)');
    first.shutdown?.();
    for (let i = 0; i < 5; i++) {
      await flush();
    }
    expect(sent.map(s => `${s.method} ${s.endpoint}`)).toContain(
      'DELETE sessions/analysis'
    );
    expect(manager.running({ mode: 'list' }).map(i => i.label())).toEqual([
      'plots'
    ]);
    expect(panel.shown).toEqual(['plots']);
    panel.dispose();
  });

  it('Shut Down All stops every session, and a stop that fails says why', async () => {
    let listed = [session('a'), session('b'), session('c')];
    const failures: string[] = [];
    const { client, sent } = scripted({
      'GET sessions': () => ({ sessions: listed }),
      'DELETE sessions/a': () => {
        listed = listed.filter(s => s.name !== 'a');
        return { name: 'a', stopped: true };
      },
      // Gone already (its idle stop came first): no error.
      'DELETE sessions/b': [404, { message: 'no session b' }],
      'DELETE sessions/c': [500, { message: 'the kernel did not answer' }]
    });
    const model = new SessionsModel(client);
    const manager = sessionsRunningManager(model, {
      icon,
      failed: message => failures.push(message)
    });
    await model.refresh();
    expect(
      typeof manager.shutdownAllConfirmationText === 'function'
        ? manager.shutdownAllConfirmationText()
        : ''
    ).toContain('Stop all 3 of your sandbox sessions?');
    manager.shutdownAll();
    for (let i = 0; i < 5; i++) {
      await flush();
    }
    expect(
      sent.filter(s => s.method === 'DELETE').map(s => s.endpoint)
    ).toEqual(['sessions/a', 'sessions/b', 'sessions/c']);
    expect(failures).toEqual(['the kernel did not answer']);
  });

  it('polls only while a list that watches is shown', async () => {
    jest.useFakeTimers();
    try {
      const { client, sent } = scripted({ 'GET sessions': { sessions: [] } });
      const model = new SessionsModel(client);
      let shown = false;
      const unwatch = model.watch(() => shown);
      jest.advanceTimersByTime(12_000);
      expect(sent).toHaveLength(0);
      shown = true;
      jest.advanceTimersByTime(5_000);
      expect(sent).toHaveLength(1);
      unwatch();
      jest.advanceTimersByTime(20_000);
      expect(sent).toHaveLength(1);
    } finally {
      jest.useRealTimers();
    }
  });
});
