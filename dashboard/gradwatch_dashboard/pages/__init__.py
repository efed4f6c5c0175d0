"""One module per page: ``PATH`` (a regex with named groups), ``layout(**params)``,
``register(app)``; each callback's work is a plain function of an ``Api`` (tested alone)."""
