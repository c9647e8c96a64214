"""The ``vllm.general_plugins`` entry point: runs in every vLLM process
(API server, engine core, workers) once Meridian is installed, whether or not
its scheduler or processor is enabled.

It loads Meridian's configuration ($MERIDIAN_CONFIG, ./meridian.toml,
~/.config/meridian/meridian.toml, else the defaults), applies its
``[logging]`` (level, format) to the ``meridian`` loggers and the C++ core, and logs what it found. It
never raises: an invalid file is logged as an error here, and the scheduler
and the processor, which need it, refuse to start with the same message in
the engines that enabled them (a stray meridian.toml must not stop a vLLM
that does not use Meridian). Nothing else of Meridian runs in an engine that
did not enable a part: the forcing processor has no ``vllm.logits_processors``
entry point (it is built only where ``--logits-processors`` lists it).
"""
from __future__ import annotations

import logging

logger = logging.getLogger("meridian.vllm")

_done = False


def register() -> None:
    global _done
    if _done:  # vLLM may call it more than once per process
        return
    _done = True
    try:
        from ._setup import MeridianSetupError, load_meridian_config

        try:
            config, source = load_meridian_config()
        except MeridianSetupError as e:
            logger.error("%s (engines that enable meridian.vllm.Scheduler or ForceThinkEnd will not start; "
                         "others are not affected)", e)
            return
        from ..logging_setup import configure_logging

        configure_logging(config)  # the meridian logger and the C++ core's: [logging] level and format
        logger.debug("meridian: configuration from %s", source)
    except Exception as e:  # noqa: BLE001 - a plugin must never stop vLLM
        logger.error("meridian: plugin setup failed (%s: %s); Meridian's parts will report it when used",
                     type(e).__name__, e)
