from storebench.cli import main

main()
