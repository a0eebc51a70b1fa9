"""Front ends other than the Python API: the command line (``cli``) and the R bridge."""
