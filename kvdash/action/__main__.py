"""``python -m kvdash.action prepare|comment``: the steps of action.yml."""

if __name__ == "__main__":
    from kvdash.action.pr import main

    raise SystemExit(main())
