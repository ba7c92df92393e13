from hybridplan.cli import main

main()
