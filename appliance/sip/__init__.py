"""SIP calls: a user agent server on UDP whose calls are audio endpoints for the conversation pipeline.

    server = SipServer(settings.sip, handler)   # handler: async (CallAudio) -> None, once per call
    await server.start()
    ...
    await server.stop()                          # BYE to every call

Pure parts (message framing, header fields, request checks, dialogs, SDP) are separate modules and
have no I/O; the sockets are ``server.SipServer`` and ``appliance.rtp.stream.RtpStream``.
"""

from appliance.sip.call import FRAME_SAMPLES, SAMPLE_RATE_HZ, Call, CallAudio, CallHandler, CallState
from appliance.sip.handlers import EchoHandler, PlaybackHandler
from appliance.sip.message import SipRequest, SipResponse, SipSyntaxError, parse_message
from appliance.sip.sdp import SdpError, negotiate, parse_sdp
from appliance.sip.server import SipServer
from appliance.sip.stats import ServerStats

__all__ = [
    "FRAME_SAMPLES",
    "SAMPLE_RATE_HZ",
    "Call",
    "CallAudio",
    "CallHandler",
    "CallState",
    "EchoHandler",
    "PlaybackHandler",
    "SdpError",
    "ServerStats",
    "SipRequest",
    "SipResponse",
    "SipServer",
    "SipSyntaxError",
    "negotiate",
    "parse_message",
    "parse_sdp",
]
