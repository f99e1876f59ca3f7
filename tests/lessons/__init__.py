"""Tests of the lessons' notebooks, run as students run them (JupyterLab, Colab)."""
