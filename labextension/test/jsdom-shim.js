// jsdom lacks DragEvent, which @lumino/dragdrop subclasses at import (JupyterLab's testutils shims it too).
if (typeof window !== 'undefined' && typeof window.DragEvent === 'undefined') {
  window.DragEvent = class DragEvent extends window.MouseEvent {};
  global.DragEvent = window.DragEvent;
}
