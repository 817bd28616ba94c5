"""``python -m tflux.cli``: the ``tflux`` script."""

from tflux.cli.app import main

main()
