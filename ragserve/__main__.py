from ragserve.cli import app

app(prog_name="ragserve")
