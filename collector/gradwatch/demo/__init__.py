"""The demo training script (`python -m gradwatch.demo.training VARIANT`) run by `gradwatch
demo`."""
