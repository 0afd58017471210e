"""The speed/risk frontier drawn: its routes (frontier.png / .svg) and the chart a render worker draws."""
