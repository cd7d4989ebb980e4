"""The shell: the ``kale`` command, the terminal helpers it prints with, the demo and the
operator dashboard. Nothing else in the project imports this package; it imports the rest."""
