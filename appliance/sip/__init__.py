"""SIP calls: a user agent server on UDP, TCP or TLS whose calls are audio endpoints for the
conversation pipeline.

    server = SipServer(settings.sip, handler)   # appliance.sip.server; handler: async (CallAudio) -> None
    await server.start()
    ...
    await server.stop()                          # BYE to every call

Pure parts (message framing, header fields, request checks, dialogs, SDP) are separate modules and
have no I/O; the sockets are ``server.SipServer`` and ``appliance.rtp.stream.RtpStream``. Nothing is
imported here, so that the settings (``params``) and labels (``labels``) load without the sockets.
"""
