"""Task files (`tasks/*.yaml`), train configs (`train/*.yaml`) and the judge's task-text variants
(`variants/*.yaml`: word swaps, paraphrases, held-out-only tasks), installed as the data package
`robo_prm.configs` and found with `importlib.resources`."""
