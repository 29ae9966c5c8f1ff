"""Real machines' published outputs, replayed through the real probe (issue 38).

- :mod:`.corpus`: the folders of ``tests/captures`` and their ``source.yaml``.
- :mod:`.nvsmi_text`, :mod:`.nvsmi_readings`, :mod:`.tools`: strict parsers of
  ``nvidia-smi -q`` (text and XML), ``ibstat``, ``ibstatus``, ``nvidia-smi nvlink -s``,
  the kernel log's Xid lines and lspci's link lines, into :mod:`.model`.
- :mod:`.fake_nvml`: a ``pynvml`` stand-in answering from a capture.
- :mod:`.replay`: the real backend, measurements, judges and verdict over a capture.
"""
