// nbstream's JupyterLab extension: a notebook open with "No Kernel" shows its saved widgets.
//
// Why: ipywidgets' JupyterLab manager (jupyterlab_widgets 3.0.x) makes a notebook's widget
// manager only once the notebook's session is ready *with a kernel*: it keys the manager by
// `sessionContext.session.kernel.id` after `await sessionContext.ready`. With "No Kernel",
// either `ready` never resolves (No Kernel chosen in the kernel picker) or there is no
// session to read the id from, so no manager is ever made and every widget output says
// "Loading widget..." forever, although the notebook carries the widgets' saved state
// (upstream: jupyterlab/jupyterlab#15361, jupyter-widgets/ipywidgets#3773 and #3823). Even
// a manager made by hand would fail: restoring saved state first asks the kernel which
// widgets are live (`_get_comm_info`), which throws with no kernel.
//
// What: for a notebook that has had no kernel since it opened, once it is known to get
// none ("No Kernel" chosen in the kernel picker, or a session ready without a kernel),
// this plugin makes the widget manager upstream would have made, through
// upstream's own exported `registerWidgetManager`, which registers every widget module
// (anywidget, ipywidgets' controls, ...) and binds the notebook's widget outputs, present
// and future, to it. The manager is given a view of the notebook's context in which the
// session holds a stand-in kernel that handles no comms (`handleComms: false`, a case the
// manager already knows: nothing to load from it) and reports no live widget: the manager
// then loads the notebook's saved state, as `jupyter nbconvert --to html` pages do, and
// each view draws from it (nbstream's views show "Saved output" and Replay). That manager
// never talks to a kernel, and never writes the widget state on save (it holds only saved,
// dead models; writing them would delete the state the notebook carries).
//
// A kernel connecting later takes over as before: when "No Kernel" was chosen in the kernel
// picker, upstream's manager, still waiting for the session to be ready, is made when the
// kernel starts; when the session was ready without one, this plugin asks upstream's
// `registerWidgetManager` for the kernel's manager then. New widget outputs go to that
// manager; the saved views already on the page stay as they are.
//
// A notebook that has had a kernel is left alone: upstream's manager holds its widgets,
// and their views stay on the page if the kernel goes away.

import { registerWidgetManager, WidgetRenderer } from "@jupyter-widgets/jupyterlab-manager";
import { ISessionContextDialogs } from "@jupyterlab/apputils";
import { INotebookTracker } from "@jupyterlab/notebook";
import { Signal } from "@lumino/signaling";

let standIns = 0;

/** A signal that never fires: what the saved-state manager listens to instead. */
function quiet(owner) {
  return new Signal(owner);
}

function isSignal(value) {
  return (
    value != null && typeof value.connect === "function" && typeof value.disconnect === "function"
  );
}

/** A kernel that is not there: no comms, no live widget (the manager loads saved state). */
function standInKernel() {
  standIns += 1;
  return {
    id: `nbstream-no-kernel-${standIns}`,
    name: "",
    handleComms: false,
    registerCommTarget() {},
    removeCommTarget() {},
    async requestCommInfo() {
      return { content: { status: "ok", comms: {} } };
    },
    createComm() {
      throw new Error("No kernel: the notebook's widgets show their saved state");
    },
  };
}

/**
 * The notebook's context as the saved-state manager sees it: the real model, path and URL
 * resolver; a session that is ready with the stand-in kernel; no session or save signal.
 */
function savedStateContext(context) {
  const session = { kernel: standInKernel() };
  const quietSignals = new Map();
  const silence = (key, value) => {
    if (!quietSignals.has(key)) quietSignals.set(key, quiet(value));
    return quietSignals.get(key);
  };
  const sessionContext = new Proxy(context.sessionContext, {
    get(target, prop) {
      if (prop === "ready") return Promise.resolve();
      if (prop === "isReady") return true;
      if (prop === "session") return session;
      const value = Reflect.get(target, prop);
      if (isSignal(value)) return silence(`session.${String(prop)}`, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return new Proxy(context, {
    get(target, prop) {
      if (prop === "sessionContext") return sessionContext;
      // Saving the file must not make the manager write the widget state (see above).
      if (prop === "saveState") return silence("saveState", target);
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** The widget outputs of a notebook's code cells (as upstream's plugin finds them). */
function* widgetRenderers(notebook) {
  for (const cell of notebook.widgets) {
    if (cell.model.type !== "code" || !cell.outputArea) continue;
    for (const output of cell.outputArea.widgets) {
      for (const child of Array.from(output.children())) {
        if (child instanceof WidgetRenderer) yield child;
      }
    }
  }
}

/** Run `fn`, saying in the console what went wrong (an incompatible ipywidgets, say). */
function guarded(fn, ...args) {
  try {
    fn(...args);
  } catch (error) {
    console.error("nbstream: could not show the notebook's saved widgets without a kernel", error);
  }
}

/**
 * Watch one notebook: take over its widgets once it is known to have no kernel. Returns
 * what to call when the kernel picker for its session closes.
 */
function watch(panel) {
  const sessionContext = panel.sessionContext;
  let hadKernel = false;
  // Set when the saved-state manager is made: whether the session was ready then (upstream
  // has then given up on this notebook; otherwise it still waits for `ready`).
  let tookOver = null;

  const takeOver = (when) => {
    tookOver = when;
    const savedManager = registerWidgetManager(
      savedStateContext(panel.context),
      panel.content.rendermime,
      widgetRenderers(panel.content),
    );
    panel.disposed.connect(() => savedManager.dispose());
  };

  const check = (picked) => {
    if (panel.isDisposed || !panel.context.isReady) return;
    if (tookOver === "pending" && sessionContext.isReady && !sessionContext.session?.kernel) {
      // The kernel chosen after "No Kernel" failed to start: the session is ready without
      // one, and upstream, which waited for `ready`, has now given up on this notebook.
      tookOver = "ready";
    }
    if (sessionContext.session?.kernel) {
      if (!hadKernel && tookOver === "ready") {
        // Upstream's manager for this kernel, made as upstream would have (kept by kernel
        // id, and reused when the notebook is opened again on the same kernel: so never
        // disposed here with the panel, as upstream never disposes its own).
        registerWidgetManager(panel.context, panel.content.rendermime, widgetRenderers(panel.content));
      }
      hadKernel = true;
      return;
    }
    if (hadKernel || tookOver) return;
    if (sessionContext.isReady) {
      takeOver("ready"); // ready with no kernel (a kernel preference that starts none)
    } else if (picked && sessionContext.hasNoKernel) {
      takeOver("pending"); // "No Kernel" chosen in the kernel picker (or the picker cancelled)
    }
  };

  const onChange = () => guarded(check, false);
  const setup = () => {
    check(false);
    sessionContext.kernelChanged.connect(onChange);
    sessionContext.sessionChanged.connect(onChange);
    sessionContext.statusChanged.connect(onChange);
    sessionContext.ready.then(onChange, () => {});
  };
  // A panel closed before its file loaded rejects `ready`: nothing to do then.
  panel.context.ready.then(() => guarded(setup), () => {});
  return () => guarded(check, true);
}

/** @type {import('@jupyterlab/application').JupyterFrontEndPlugin<void>} */
const plugin = {
  id: "nbstream:saved-widgets-without-kernel",
  description: "A notebook open with No Kernel shows its widgets' saved state.",
  autoStart: true,
  requires: [INotebookTracker, ISessionContextDialogs],
  activate: (_app, tracker, dialogs) => {
    // Session context -> the checks of its notebook's views ("New View for Notebook" makes
    // a second panel on the same context).
    const pickerClosed = new WeakMap();
    // Choosing "No Kernel" in the picker leaves the session exactly as it was (no signal,
    // not ready, no kernel): the picker closing is the only sign of the choice, so the
    // dialogs service documents use is wrapped to report it. Nothing else changes.
    const selectKernel = dialogs.selectKernel;
    dialogs.selectKernel = async function (sessionContext, ...rest) {
      try {
        return await selectKernel.call(this, sessionContext, ...rest);
      } finally {
        for (const closed of pickerClosed.get(sessionContext) ?? []) closed();
      }
    };
    const add = (panel) => {
      const checks = pickerClosed.get(panel.sessionContext) ?? new Set();
      pickerClosed.set(panel.sessionContext, checks);
      const closed = watch(panel);
      checks.add(closed);
      panel.disposed.connect(() => checks.delete(closed));
    };
    tracker.forEach(add);
    tracker.widgetAdded.connect((_tracker, panel) => add(panel));
  },
};

export default plugin;
