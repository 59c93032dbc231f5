"""Trained models out: a transformers folder (folder.py, hf.py; the law as shipped:
modeling_ssmax.py) and its command line (`python -m ssmax.export`)."""
