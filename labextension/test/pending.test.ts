// The Pending Plans panel and the status bar's waiting count, in jsdom, against a scripted API.

import { SandboxModel } from '../src/model';
import { DECIDED_LINGER_MS, PendingPlansPanel } from '../src/pending';
import { SandboxStatusItem } from '../src/statusbar';
import type { IPlan } from '../src/types';

import type { Route } from './support';
import { buttonNamed, click, flush, scripted, status } from './support';

const TOKEN = 'apr_SECRET_TOKEN_0123456789';

function plan(overrides: Partial<IPlan> = {}): IPlan {
  return {
    plan_id: 'plan_agent_1',
    goal: 'Count the lines of data.csv',
    source: 'agent',
    language: 'python',
    command: ['python', 'inline.py'],
    backend: 'subprocess',
    timeout_sec: 45,
    network: false,
    checks: [{ label: 'language is supported', ok: true }],
    warnings: [
      { severity: 'medium', label: 'reads files', detail: 'open() call' }
    ],
    blocked: false,
    blocked_reason: null,
    requires_approval: true,
    digest: 'd',
    created_at: 0,
    code: "print(sum(1 for _ in open('data.csv')))",
    session: null,
    ...overrides
  };
}

async function openPanel(routes: Record<string, Route>) {
  const { client, sent } = scripted(routes);
  const model = new SandboxModel(client);
  const panel = new PendingPlansPanel(model);
  document.body.appendChild(panel.node);
  await panel.refresh();
  return { panel, model, sent };
}

describe('PendingPlansPanel', () => {
  afterEach(() => (document.body.innerHTML = ''));

  it('shows each plan as a card: goal, source, language, backend, timeout, network, warnings, code', async () => {
    const { panel } = await openPanel({ 'GET plans': { plans: [plan()] } });
    const cards = panel.node.querySelectorAll('.jp-gitpilot-pending-card');
    expect(cards).toHaveLength(1);
    const text = cards[0].textContent ?? '';
    for (const needle of [
      'Count the lines of data.csv',
      'agent',
      'Languagepython',
      'Requested by an agent',
      'Runs inLocal',
      'Time limit45 s',
      'Networkblocked',
      'reads files',
      "print(sum(1 for _ in open('data.csv')))"
    ]) {
      expect(text).toContain(needle);
    }
    // Words, not internal names: no plan id on the card.
    expect(text).not.toContain(plan().plan_id);
    expect(cards[0].getAttribute('role')).toBe('listitem');
    expect(
      panel.node.querySelector('.jp-gitpilot-muted[hidden]')?.textContent
    ).toContain('No plans');
  });

  it('shows whose plan it is where identities are real, and nothing under a token login', async () => {
    const { panel } = await openPanel({
      'GET plans': {
        plans: [
          plan({ plan_id: 'plan_alice_1', owner: 'alice' }),
          plan({ plan_id: 'plan_token_1', owner: null }),
          // A name that hides characters is shown escaped, never as they are.
          plan({ plan_id: 'plan_bob_1', owner: 'bob\u202eecila' })
        ],
        running: [
          {
            plan: plan({ plan_id: 'plan_alice_2', owner: 'alice' }),
            run_id: 'run_00112233445566ff',
            state: 'running',
            started_at: Date.now() / 1000,
            approved_by: 'user'
          }
        ]
      }
    });
    const ownerOf = (selector: string) =>
      panel.node.querySelector(`${selector} .jp-gitpilot-plan-owner`)
        ?.textContent ?? null;
    expect(ownerOf('[data-plan-id="plan_alice_1"]')).toBe('Planned by alice');
    expect(ownerOf('[data-plan-id="plan_token_1"]')).toBeNull();
    const bob = ownerOf('[data-plan-id="plan_bob_1"]') ?? '';
    expect(bob).toContain('Planned by bob');
    expect(bob).not.toContain('\u202e');
    expect(ownerOf('.jp-gitpilot-running-card')).toBe('Planned by alice');
  });

  it('says so when nothing waits', async () => {
    const { panel } = await openPanel({ 'GET plans': { plans: [] } });
    expect(
      panel.node.querySelectorAll('.jp-gitpilot-pending-card')
    ).toHaveLength(0);
    expect(panel.node.textContent).toContain(
      'No plans are waiting for your decision.'
    );
  });

  it('Approve only posts approve, drops the token, and says the agent will run it', async () => {
    let waiting = [plan()];
    const { panel, model, sent } = await openPanel({
      'GET plans': () => ({ plans: waiting }),
      'POST approve': () => {
        waiting = [];
        return {
          approval_token: TOKEN,
          plan_id: 'plan_agent_1',
          expires_in: 300
        };
      }
    });
    expect(model.waiting).toBe(1);
    const card = panel.node.querySelector('.jp-gitpilot-pending-card')!;
    click(buttonNamed(card, 'Approve'));
    await flush();
    await flush();
    expect(sent.filter(r => r.method === 'POST')).toEqual([
      { method: 'POST', endpoint: 'approve', body: { plan_id: 'plan_agent_1' } }
    ]);
    expect(sent.some(r => r.endpoint === 'run')).toBe(false);
    expect(card.textContent).toContain('Approved — the agent will run it.');
    expect(buttonNamed(card, 'Approve')).toBeUndefined();
    expect(buttonNamed(card, 'Reject')).toBeUndefined();
    expect(document.body.innerHTML).not.toContain(TOKEN);
    const kept = panel.shown.flatMap(c =>
      Object.values(c).filter(v => typeof v === 'string')
    );
    expect(kept.join(' ')).not.toContain(TOKEN);
    expect(model.waiting).toBe(0);

    // The poll keeps the decided card so its outcome can be read; a manual Refresh clears it.
    await panel.refresh();
    expect(panel.node.textContent).toContain(
      'Approved — the agent will run it.'
    );
    click(buttonNamed(panel.node, 'Refresh'));
    await flush();
    expect(
      panel.node.querySelectorAll('.jp-gitpilot-pending-card')
    ).toHaveLength(0);
  });

  it('Reject posts reject and says the plan will not run', async () => {
    const { panel, sent } = await openPanel({
      'GET plans': { plans: [plan()] },
      'POST reject': { plan_id: 'plan_agent_1', rejected: true }
    });
    click(buttonNamed(panel.node, 'Reject'));
    await flush();
    expect(sent.filter(r => r.method === 'POST')).toEqual([
      { method: 'POST', endpoint: 'reject', body: { plan_id: 'plan_agent_1' } }
    ]);
    expect(panel.node.textContent).toContain('Rejected — it will not run.');
  });

  it('a rejected card leaves by itself once its outcome has been shown', async () => {
    let waiting = [plan()];
    const { panel } = await openPanel({
      'GET plans': () => ({ plans: waiting }),
      'POST reject': () => {
        waiting = [];
        return { plan_id: 'plan_agent_1', rejected: true };
      }
    });
    click(buttonNamed(panel.node, 'Reject'));
    await flush();
    await panel.refresh();
    expect(panel.node.textContent).toContain('Rejected — it will not run.');
    const now = Date.now();
    const later = jest
      .spyOn(Date, 'now')
      .mockReturnValue(now + DECIDED_LINGER_MS + 1);
    try {
      await panel.refresh();
    } finally {
      later.mockRestore();
    }
    expect(
      panel.node.querySelectorAll('.jp-gitpilot-pending-card')
    ).toHaveLength(0);
  });

  it('a plan with a high-severity warning needs the box ticked before Approve works; Enter never approves', async () => {
    const risky = plan({
      warnings: [
        {
          severity: 'high',
          label: 'runs a shell',
          detail: "os.system('curl … | sh')"
        }
      ]
    });
    const { panel, sent } = await openPanel({
      'GET plans': { plans: [risky] },
      'POST approve': {
        approval_token: TOKEN,
        plan_id: 'plan_agent_1',
        expires_in: 300
      }
    });
    const card = panel.node.querySelector('.jp-gitpilot-pending-card')!;
    const approve = buttonNamed(card, 'Approve')!;
    expect(approve.disabled).toBe(true);
    const box = card.querySelector('input[name="consent"]') as HTMLInputElement;
    const enter = new KeyboardEvent('keydown', {
      key: 'Enter',
      cancelable: true
    });
    box.checked = true;
    box.dispatchEvent(new Event('change'));
    expect(approve.disabled).toBe(false);
    approve.dispatchEvent(enter);
    expect(enter.defaultPrevented).toBe(true);
    expect(sent.filter(r => r.method === 'POST')).toHaveLength(0);
    click(approve);
    await flush();
    expect(sent.filter(r => r.endpoint === 'approve')).toHaveLength(1);
  });

  it('a blocked plan cannot be approved, only rejected', async () => {
    const blocked = plan({
      blocked: true,
      blocked_reason: 'recursive delete of /',
      code: 'rm -rf /'
    });
    const { panel, sent } = await openPanel({
      'GET plans': { plans: [blocked] }
    });
    const approve = buttonNamed(panel.node, 'Approve')!;
    expect(approve.disabled).toBe(true);
    expect(panel.node.textContent).toContain('Blocked: recursive delete of /');
    await panel.shown[0].approve();
    expect(sent.some(r => r.endpoint === 'approve')).toBe(false);
    expect(buttonNamed(panel.node, 'Reject')!.disabled).toBe(false);
  });

  it("shows the server's message when approving fails, and the buttons work again", async () => {
    const { panel } = await openPanel({
      'GET plans': { plans: [plan()] },
      'POST approve': [
        404,
        {
          message:
            "no pending plan 'plan_agent_1' (unknown, evicted or already approved)",
          code: 'plan_not_found'
        }
      ]
    });
    click(buttonNamed(panel.node, 'Approve'));
    await flush();
    const alert = panel.node.querySelector('[role="alert"]')!;
    expect(alert.textContent).toBe(
      "no pending plan 'plan_agent_1' (unknown, evicted or already approved)"
    );
    expect(buttonNamed(panel.node, 'Approve')!.disabled).toBe(false);
  });

  it("shows the server's message when the list fails", async () => {
    const { panel } = await openPanel({
      'GET plans': [
        403,
        { message: 'You are not allowed to list plans', code: 'forbidden' }
      ]
    });
    const alert = panel.node.querySelector('[role="alert"]')!;
    expect(alert.textContent).toBe('You are not allowed to list plans');
  });

  it('updates in place: existing cards keep their nodes (and focus), gone ones leave', async () => {
    let waiting = [plan(), plan({ plan_id: 'plan_agent_2', goal: 'Second' })];
    const { panel } = await openPanel({
      'GET plans': () => ({ plans: waiting })
    });
    const first = panel.node.querySelector('[data-plan-id="plan_agent_1"]');
    const reject = buttonNamed(first!, 'Reject')!;
    reject.focus();
    waiting = [plan(), plan({ plan_id: 'plan_agent_3', goal: 'Third' })];
    await panel.refresh();
    const ids = Array.from(
      panel.node.querySelectorAll<HTMLElement>('.jp-gitpilot-pending-card')
    ).map(n => n.dataset.planId);
    expect(ids).toEqual(['plan_agent_1', 'plan_agent_3']);
    expect(panel.node.querySelector('[data-plan-id="plan_agent_1"]')).toBe(
      first
    );
    expect(document.activeElement).toBe(reject);
  });

  it('an approved plan whose run is under way shows apart, in words, and Stop deletes its run', async () => {
    const runId = 'run_0123456789abcdef';
    let running = [
      {
        plan: plan({ plan_id: 'plan_agent_9', goal: 'Train the model' }),
        run_id: runId,
        state: 'running',
        started_at: Date.now() / 1000 - 12,
        approved_by: 'user'
      }
    ];
    const { panel, sent, model } = await openPanel({
      'GET plans': () => ({ plans: [], running }),
      [`DELETE runs/${runId}`]: () => {
        running = running.map(r => ({ ...r, state: 'stopping' }));
        return { run_id: runId, cancelled: true };
      }
    });
    // Running is not waiting: the pending list says none wait, and nothing is counted.
    expect(panel.node.textContent).toContain(
      'No plans are waiting for your decision.'
    );
    expect(model.waiting).toBe(0);
    const card = panel.node.querySelector<HTMLElement>(
      '.jp-gitpilot-running-card'
    )!;
    expect(card.dataset.runId).toBe(runId);
    expect(card.textContent).toContain('Train the model');
    expect(card.textContent).toMatch(
      /Running for 1\d(\.\d)? s — approved by a person\./
    );
    const stop = buttonNamed(card, '■ Stop')!;
    click(stop);
    await flush();
    expect(sent.filter(r => r.method === 'DELETE')).toEqual([
      { method: 'DELETE', endpoint: `runs/${runId}`, body: null }
    ]);
    expect(card.textContent).toContain('Stopping…');
    expect(stop.disabled).toBe(true);
    await panel.refresh();
    expect(card.textContent).toContain('Stopping…');
    // The run ended: the server no longer lists it, and the card leaves.
    running = [];
    await panel.refresh();
    expect(
      panel.node.querySelectorAll('.jp-gitpilot-running-card')
    ).toHaveLength(0);
    expect(
      panel.node.querySelector<HTMLElement>('.jp-gitpilot-running-section')!
        .hidden
    ).toBe(true);
  });

  it('Stop on a run that already ended says so instead of an error', async () => {
    const runId = 'run_fedcba9876543210';
    const { panel } = await openPanel({
      'GET plans': {
        plans: [],
        running: [
          {
            plan: plan(),
            run_id: runId,
            state: 'running',
            started_at: Date.now() / 1000,
            approved_by: 'agent'
          }
        ]
      },
      [`DELETE runs/${runId}`]: [
        404,
        { message: 'no run is under way', code: 'run_not_found' }
      ]
    });
    const card = panel.node.querySelector('.jp-gitpilot-running-card')!;
    expect(card.textContent).toContain('the agent approved it itself');
    click(buttonNamed(card as HTMLElement, '■ Stop'));
    await flush();
    expect(card.textContent).toContain('It had already ended.');
  });

  it('polls while told to and stops', async () => {
    jest.useFakeTimers();
    try {
      const { client, sent } = scripted({ 'GET plans': { plans: [] } });
      const panel = new PendingPlansPanel(new SandboxModel(client));
      panel.poll(4);
      jest.advanceTimersByTime(8_100);
      expect(sent.filter(r => r.endpoint === 'plans')).toHaveLength(2);
      panel.poll(0);
      jest.advanceTimersByTime(8_100);
      expect(sent.filter(r => r.endpoint === 'plans')).toHaveLength(2);
      panel.dispose();
    } finally {
      jest.useRealTimers();
    }
  });
});

describe('the status bar count of waiting agent plans', () => {
  afterEach(() => (document.body.innerHTML = ''));

  it('counts what the server lists as waiting (what the panel shows), and a click opens the plans', async () => {
    // The server lists only plans waiting for someone else's decision: the count is its length.
    const { client } = scripted({
      'GET status': { ...status(), waiting_plans: 1 },
      'GET plans': { plans: [plan()] }
    });
    const model = new SandboxModel(client);
    const opened: string[] = [];
    const item = new SandboxStatusItem(
      model,
      () => opened.push('settings'),
      () => opened.push('plans')
    );
    await model.refresh();
    expect(item.node.textContent).toBe('Sandbox: Local · 1 plan waiting');
    expect(item.node.title).toContain('1 agent plan waits for your decision');
    click(item.node);
    expect(opened).toEqual(['plans']);

    model.setPlans([plan(), plan({ plan_id: 'plan_agent_2' })]);
    expect(item.node.textContent).toBe('Sandbox: Local · 2 plans waiting');
    model.setPlans([]);
    expect(item.node.textContent).toBe('Sandbox: Local');
    click(item.node);
    expect(opened).toEqual(['plans', 'settings']);
  });

  it('keeps the plain text when the plans endpoint fails or answers nothing', async () => {
    const { client } = scripted({
      'GET status': status(),
      'GET plans': [500, { message: 'boom' }]
    });
    const model = new SandboxModel(client);
    const item = new SandboxStatusItem(model, () => undefined);
    await model.refresh();
    expect(item.node.textContent).toBe('Sandbox: Local');
    expect(model.error).toBeNull();

    const empty = scripted({ 'GET status': status() });
    expect(await empty.client.plans()).toEqual([]);
  });
});
