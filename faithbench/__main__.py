from faithbench.bench.cli import main

if __name__ == "__main__":  # importing it (docs tools inspect every module) runs nothing
    raise SystemExit(main(prog="python -m faithbench"))
