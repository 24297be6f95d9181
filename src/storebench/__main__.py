from storebench.cli.main import main

main()
