"""Setting a run up and owning it: watch(), the Run handle, options, auto-attach for `gradwatch
run`, AMP detection, portability of what gradwatch puts on a model, quiet subprocesses."""
