"""The command line's entry point (``storebench``, ``python -m storebench``):
an interrupt while the command line is still being imported ends it as one
later would (``interrupts.exit_interrupted``), not with a traceback."""


def main() -> None:
    try:
        from storebench.cli.main import main as cli_main
    except KeyboardInterrupt as exc:
        from storebench.common import interrupts

        interrupts.exit_interrupted(exc)
    cli_main()


if __name__ == "__main__":
    main()
