"""``python -m tflux``: the ``tflux`` command line (the same as the ``tflux`` script)."""

from tflux.cli.app import main

if __name__ == "__main__":
    main()
