"""Task files (`tasks/*.yaml`) and train configs (`train/*.yaml`), installed as the data package
`robo_prm.configs` and found with `importlib.resources`."""
