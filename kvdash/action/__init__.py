"""The GitHub Action's steps (see action.yml at the repository root and kvdash.action.pr)."""
