// The incremental output writer (one DOM write per frame), the running clock, and the
// detector that says which agent plans are new.

import { coalesce, formatElapsed, FrameAppender } from '../src/appender';
import { NewPlansDetector } from '../src/model';
import { OutputView, RERUN_EVENT } from '../src/render';
import type { IPlan } from '../src/types';

function manualFrames(): {
  schedule: (f: () => void) => void;
  run: () => number;
} {
  let queued: Array<() => void> = [];
  return {
    schedule: flush => queued.push(flush),
    run: () => {
      const now = queued;
      queued = [];
      now.forEach(flush => flush());
      return now.length;
    }
  };
}

describe('FrameAppender', () => {
  it('writes nothing until the frame, then once, in one span per stream run', () => {
    const box = document.createElement('pre');
    const frames = manualFrames();
    const appender = new FrameAppender(box, frames.schedule);
    for (let i = 0; i < 1000; i++) {
      appender.push('stdout', 'x');
    }
    appender.push('stderr', 'E');
    appender.push('stdout', 'y');
    expect(box.textContent).toBe('');
    expect(frames.run()).toBe(1); // a thousand chunks, one frame
    expect(box.children.length).toBe(3);
    expect(box.textContent).toBe('x'.repeat(1000) + 'Ey');
    expect(box.children[1].className).toBe('jp-gitpilot-stderr');
  });

  it('grows the last text node in place across frames', () => {
    const box = document.createElement('pre');
    const frames = manualFrames();
    const appender = new FrameAppender(box, frames.schedule);
    appender.push('stdout', 'ab');
    frames.run();
    const node = box.firstChild!.firstChild;
    appender.push('stdout', 'cd');
    frames.run();
    expect(box.children.length).toBe(1);
    expect(box.firstChild!.firstChild).toBe(node);
    expect(box.textContent).toBe('abcd');
  });

  it('flushes on demand and clears', () => {
    const box = document.createElement('pre');
    const appender = new FrameAppender(box, () => undefined);
    appender.push('stdout', 'now');
    expect(appender.pending).toBe(true);
    appender.flush();
    expect(box.textContent).toBe('now');
    appender.clear();
    expect(box.textContent).toBe('');
  });

  it('coalesces neighbours of one stream and drops empty pieces', () => {
    expect(
      coalesce([
        ['stdout', 'a'],
        ['stdout', 'b'],
        ['stderr', ''],
        ['stderr', 'c'],
        ['stdout', 'd']
      ])
    ).toEqual([
      ['stdout', 'ab'],
      ['stderr', 'c'],
      ['stdout', 'd']
    ]);
  });
});

describe('formatElapsed', () => {
  it('counts seconds, then minutes and hours', () => {
    expect(formatElapsed(0)).toBe('0 s');
    expect(formatElapsed(59_999)).toBe('59 s');
    expect(formatElapsed(65_000)).toBe('1:05');
    expect(formatElapsed(3_723_000)).toBe('1:02:03');
  });
});

describe('OutputView actions', () => {
  const done = {
    exit_code: 0,
    stdout: '',
    stderr: '',
    duration_ms: 15,
    timed_out: false,
    truncated: false,
    backend: 'subprocess'
  } as never;

  it('shows the elapsed time while running', () => {
    const view = new OutputView();
    expect(view.node.querySelector('.jp-gitpilot-elapsed')?.textContent).toBe(
      '0 s'
    );
    view.finish(done);
    expect(view.node.querySelector('.jp-gitpilot-elapsed')).toBeNull();
  });

  it('offers Re-run, Copy and Clear with names once the run ended', () => {
    const view = new OutputView();
    expect(view.node.querySelector('.jp-gitpilot-output-action')).toBeNull();
    view.append('stdout', 'hello');
    view.finish(done);
    const names = Array.from(
      view.node.querySelectorAll('.jp-gitpilot-output-action')
    ).map(button => button.getAttribute('aria-label'));
    expect(names).toEqual([
      'Run this again (you approve the plan first)',
      'Copy the output',
      'Clear the output'
    ]);
    const host = document.createElement('div');
    host.appendChild(view.node);
    let reruns = 0;
    host.addEventListener(RERUN_EVENT, () => (reruns += 1));
    const [rerun, , clear] = Array.from(
      view.node.querySelectorAll<HTMLButtonElement>(
        '.jp-gitpilot-output-action'
      )
    );
    rerun.click();
    expect(reruns).toBe(1);
    expect(
      view.node.querySelector('.jp-gitpilot-output-text')?.textContent
    ).toBe('hello');
    clear.click();
    expect(view.text).toBe('');
    expect(
      view.node.querySelector('.jp-gitpilot-output-text')?.textContent
    ).toBe('');
    expect(view.node.textContent).toContain('exit 0');
  });
});

describe('NewPlansDetector', () => {
  const plan = (id: string) => ({ plan_id: id }) as IPlan;

  it('reports each plan once, and forgets plans that left the list', () => {
    const detector = new NewPlansDetector();
    expect(detector.observe([]).length).toBe(0);
    expect(
      detector.observe([plan('a'), plan('b')]).map(p => p.plan_id)
    ).toEqual(['a', 'b']);
    expect(detector.observe([plan('a'), plan('b')])).toEqual([]);
    expect(
      detector.observe([plan('b'), plan('c')]).map(p => p.plan_id)
    ).toEqual(['c']);
    expect(detector.observe([])).toEqual([]);
    expect(detector.observe([plan('a')]).map(p => p.plan_id)).toEqual(['a']);
  });
});
