from trainhub.cli import main

main()
