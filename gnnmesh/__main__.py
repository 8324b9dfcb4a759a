from .cli import main
from .launch import end_program

end_program(main())
