"""RTP media for SIP calls: packets, G.711, jitter buffer, DTMF events, 8/16 kHz edges, the UDP stream."""

from appliance.rtp.dtmf import Digit, DtmfDetector, TelephoneEvent, parse_telephone_event
from appliance.rtp.g711 import decode, encode
from appliance.rtp.jitter import JitterBuffer, JitterStats
from appliance.rtp.packet import RtpError, RtpPacket, parse_rtp
from appliance.rtp.stream import MediaParams, RtpStream

__all__ = [
    "Digit",
    "DtmfDetector",
    "JitterBuffer",
    "JitterStats",
    "MediaParams",
    "RtpError",
    "RtpPacket",
    "RtpStream",
    "TelephoneEvent",
    "decode",
    "encode",
    "parse_rtp",
    "parse_telephone_event",
]
