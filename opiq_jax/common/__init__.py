"""The ground every layer stands on: the configuration (each option declared once) and the errors."""
