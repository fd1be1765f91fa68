// jsdom lacks DragEvent, which @lumino/dragdrop subclasses at import (JupyterLab's testutils shims it too).
if (typeof window !== 'undefined' && typeof window.DragEvent === 'undefined') {
  window.DragEvent = class DragEvent extends window.MouseEvent {};
  global.DragEvent = window.DragEvent;
}
// jsdom lacks matchMedia, which @jupyterlab/apputils reads at import (JupyterLab's testutils shims it too).
if (typeof window !== 'undefined' && typeof window.matchMedia !== 'function') {
  window.matchMedia = query => ({
    matches: false,
    media: query,
    onchange: null,
    addListener: () => undefined,
    removeListener: () => undefined,
    addEventListener: () => undefined,
    removeEventListener: () => undefined,
    dispatchEvent: () => false
  });
}
// jsdom lacks requestIdleCallback, which JupyterLab's dialogs use to focus their default button.
if (
  typeof window !== 'undefined' &&
  typeof window.requestIdleCallback !== 'function'
) {
  window.requestIdleCallback = callback =>
    setTimeout(
      () => callback({ didTimeout: false, timeRemaining: () => 0 }),
      0
    );
  window.cancelIdleCallback = id => clearTimeout(id);
  global.requestIdleCallback = window.requestIdleCallback;
  global.cancelIdleCallback = window.cancelIdleCallback;
}
