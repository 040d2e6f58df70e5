"""The agent: who the appliance is at a site (``params``: the ``[agent]`` section) and the system prompt
it is given (``prompt``). Importing the package imports neither: the settings schema reads ``params``
alone."""
