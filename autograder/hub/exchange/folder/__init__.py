"""The folder exchange: nbgrader's exchange folder, made safe to read as staff."""
