"""The per-step hooks on the user's optimizer, model, loss and backward pass: they decide
*when* statistics are taken and checks run."""
