"""``train``: the supervisor (:mod:`.supervisor`), its pure retry policy (:mod:`.policy`), launching and
stopping the training process group (:mod:`.process`), what it watches (:mod:`.watch`) and what it
records (:mod:`.record`); :mod:`.demo` prepares the ``demo`` run."""
