"""RFC 4475 torture messages: the valid ones parse, the invalid ones get 400 (or 505) or are dropped.

The messages are the RFC's own, section 3, byte for byte (long lines split only in this file).
The second half sends every one to a running server and checks its answer, then that it still serves.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from appliance.sip.checks import check_request
from appliance.sip.handlers import EchoHandler
from appliance.sip.headers import parse_name_addr, parse_via
from appliance.sip.message import SipRequest, SipResponse, SipSyntaxError, parse_message
from tests.fixtures.net import send_datagram
from tests.test_sip_helpers import LOOPBACK, running_server

MESSAGES: dict[str, bytes] = {
    "wsinv": (
        b"INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0\r\n"
        b"TO :\r\n"
        b" sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n\r\n"
        b'from   : "J Rosenberg \\\\\\""       <sip:jdrosen@example.com>\r\n'
        b"  ;\r\n"
        b"  tag = 98asjd8\r\n"
        b"MaX-fOrWaRdS: 0068\r\n"
        b"Call-ID: wsinv.ndaksdj@192.0.2.1\r\n"
        b"Content-Length   : 150\r\n"
        b"cseq: 0009\r\n"
        b"  INVITE\r\n"
        b"Via  : SIP  /   2.0\r\n"
        b" /UDP\r\n"
        b"    192.0.2.2;branch=390skdjuw\r\n"
        b"s :\r\n"
        b"NewFangledHeader:   newfangled value\r\n"
        b" continued newfangled value\r\n"
        b"UnknownHeaderWithUnusualValue: ;;,,;;,;\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Route:\r\n"
        b" <sip:services.example.com;lr;unknownwith=value;unknown-no-value>\r\n"
        b"v:  SIP  / 2.0  / TCP     spindle.example.com   ;\r\n"
        b"  branch  =   z9hG4bK9ikj8  ,\r\n"
        b" SIP  /    2.0   / UDP  192.168.255.111   ; branch=\r\n"
        b" z9hG4bK30239\r\n"
        b'm:"Quoted string \\"\\"" <sip:jdrosen@example.com> ; newparam =\r\n'
        b"      newvalue ;\r\n"
        b"  secondparam ; q = 0.33\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.3\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.4\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "intmeth": (
        b"!interesting-Method0123456789_*+`.%indeed'~ sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy"
        b"?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com SIP/2.0\r\n"
        b"Via: SIP/2.0/TCP host1.example.com;branch=z9hG4bK-.!%66*_+`'~\r\n"
        b'To: "BEL:\\\x07 NUL:\\\x00 DEL:\\\x7f" <sip:1_unusual.URI~(to-be!sure)&isn\'t+it$/crazy?,/;;*@example.c'
        b"om>\r\n"
        b"From: token1~` token2'+_ token3*%!.- <sip:mundane@example.com>;fromParam''~+*_!.-%=\"\xd1\x80\xd0\xb0\xd0\xb1"
        b"\xd0\xbe\xd1\x82\xd0\xb0\xd1\x8e\xd1\x89\xd0\xb8\xd0\xb9\";tag=_token~1'+`*%!-.\r\n"
        b"Call-ID: intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{\r\n"
        b"CSeq: 139122385 !interesting-Method0123456789_*+`.%indeed'~\r\n"
        b"Max-Forwards: 255\r\n"
        b"extensionHeader-!.%*+_`'~:\xef\xbb\xbf\xe5\xa4\xa7\xe5\x81\x9c\xe9\x9b\xbb\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "esc01": (
        b"INVITE sip:sips%3Auser%40example.com@example.net SIP/2.0\r\n"
        b"To: sip:%75se%72@example.com\r\n"
        b"From: <sip:I%20have%20spaces@example.net>;tag=938\r\n"
        b"Max-Forwards: 87\r\n"
        b"i: esc01.239409asdfakjkn23onasd0-3234\r\n"
        b"CSeq: 234234 INVITE\r\n"
        b"Via: SIP/2.0/UDP host5.example.net;branch=z9hG4bKkdjuw\r\n"
        b"C: application/sdp\r\n"
        b"Contact:\r\n"
        b"  <sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31>\r\n"
        b"Content-Length: 150\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.1\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.1\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "escnull": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"To: sip:null-%00-null@example.com\r\n"
        b"From: sip:null-%00-null@example.com;tag=839923423\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID: escnull.39203ndfvkjdasfkq3w4otrq0adsfdfnavd\r\n"
        b"CSeq: 14398234 REGISTER\r\n"
        b"Via: SIP/2.0/UDP host5.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Contact: <sip:%00@host5.example.com>\r\n"
        b"Contact: <sip:%00%00@host5.example.com>\r\n"
        b"L:0\r\n"
        b"\r\n"
    ),
    "esc02": (
        b"RE%47IST%45R sip:registrar.example.com SIP/2.0\r\n"
        b'To: "%Z%45" <sip:resource@example.com>\r\n'
        b'From: "%Z%45" <sip:resource@example.com>;tag=f232jadfj23\r\n'
        b"Call-ID: esc02.asdfnqwo34rq23i34jrjasdcnl23nrlknsdf\r\n"
        b"Via: SIP/2.0/TCP host.example.com;branch=z9hG4bK209%fzsnel234\r\n"
        b"CSeq: 29344 RE%47IST%45R\r\n"
        b"Max-Forwards: 70\r\n"
        b"Contact: <sip:alias1@host1.example.com>\r\n"
        b"C%6Fntact: <sip:alias2@host2.example.com>\r\n"
        b"Contact: <sip:alias3@host3.example.com>\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "lwsdisp": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: caller<sip:caller@example.com>;tag=323\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID: lwsdisp.1234abcd@funky.example.com\r\n"
        b"CSeq: 60 OPTIONS\r\n"
        b"Via: SIP/2.0/UDP funky.example.com;branch=z9hG4bKkdjuw\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "longreq": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b'To: "I have a user name of extremeextremeextremeextremeextremeextremeextremeextremeextreme'
        b'extreme proportion"<sip:user@example.com:6000;unknownparam1=verylonglonglonglonglonglonglo'
        b"nglonglonglonglonglonglonglonglonglonglonglonglonglongvalue;longparamnamenamenamenamenamen"
        b"amenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamename=shortvalue"
        b";verylonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglongl"
        b"onglonglonglongParameterNameWithNoValue>\r\n"
        b"F: sip:amazinglylongcallernameamazinglylongcallernameamazinglylongcallernameamazinglylongc"
        b"allernameamazinglylongcallername@example.net;tag=12982982982982982982982982982982982982982"
        b"982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982"
        b"982982982982982982982424;unknownheaderparamnamenamenamenamenamenamenamenamenamenamenamenam"
        b"enamenamenamenamenamenamenamename=unknowheaderparamvaluevaluevaluevaluevaluevaluevaluevalu"
        b"evaluevaluevaluevaluevaluevaluevalue;unknownValuelessparamnameparamnameparamnameparamnamep"
        b"aramnameparamnameparamnameparamnameparamnameparamname\r\n"
        b"Call-ID: longreq.onereallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreal"
        b"lyreallyreallyreallyreallyreallyreallyreallyreallylongcallid\r\n"
        b"CSeq: 3882340 INVITE\r\n"
        b"Unknown-LongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLong-N"
        b"ame: unknown-longlonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglongl"
        b"ong-value; unknown-longlonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglon"
        b"glonglong-parameter-name = unknown-longlonglonglonglonglonglonglonglonglonglonglonglonglon"
        b"glonglonglonglonglonglong-parameter-value\r\n"
        b"Via: SIP/2.0/TCP sip33.example.com\r\n"
        b"v: SIP/2.0/TCP sip32.example.com\r\n"
        b"V: SIP/2.0/TCP sip31.example.com\r\n"
        b"Via: SIP/2.0/TCP sip30.example.com\r\n"
        b"ViA: SIP/2.0/TCP sip29.example.com\r\n"
        b"VIa: SIP/2.0/TCP sip28.example.com\r\n"
        b"VIA: SIP/2.0/TCP sip27.example.com\r\n"
        b"via: SIP/2.0/TCP sip26.example.com\r\n"
        b"viA: SIP/2.0/TCP sip25.example.com\r\n"
        b"vIa: SIP/2.0/TCP sip24.example.com\r\n"
        b"vIA: SIP/2.0/TCP sip23.example.com\r\n"
        b"V :  SIP/2.0/TCP sip22.example.com\r\n"
        b"v :  SIP/2.0/TCP sip21.example.com\r\n"
        b"V  : SIP/2.0/TCP sip20.example.com\r\n"
        b"v  : SIP/2.0/TCP sip19.example.com\r\n"
        b"Via : SIP/2.0/TCP sip18.example.com\r\n"
        b"Via  : SIP/2.0/TCP sip17.example.com\r\n"
        b"Via: SIP/2.0/TCP sip16.example.com\r\n"
        b"Via: SIP/2.0/TCP sip15.example.com\r\n"
        b"Via: SIP/2.0/TCP sip14.example.com\r\n"
        b"Via: SIP/2.0/TCP sip13.example.com\r\n"
        b"Via: SIP/2.0/TCP sip12.example.com\r\n"
        b"Via: SIP/2.0/TCP sip11.example.com\r\n"
        b"Via: SIP/2.0/TCP sip10.example.com\r\n"
        b"Via: SIP/2.0/TCP sip9.example.com\r\n"
        b"Via: SIP/2.0/TCP sip8.example.com\r\n"
        b"Via: SIP/2.0/TCP sip7.example.com\r\n"
        b"Via: SIP/2.0/TCP sip6.example.com\r\n"
        b"Via: SIP/2.0/TCP sip5.example.com\r\n"
        b"Via: SIP/2.0/TCP sip4.example.com\r\n"
        b"Via: SIP/2.0/TCP sip3.example.com\r\n"
        b"Via: SIP/2.0/TCP sip2.example.com\r\n"
        b"Via: SIP/2.0/TCP sip1.example.com\r\n"
        b"Via: SIP/2.0/TCP host.example.com;received=192.0.2.5;branch=verylonglonglonglonglonglonglo"
        b"nglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglong"
        b"longlonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglongbranch"
        b"value\r\n"
        b"Max-Forwards: 70\r\n"
        b"Contact: <sip:amazinglylongcallernameamazinglylongcallernameamazinglylongcallernameamazing"
        b"lylongcallernameamazinglylongcallername@host5.example.net>\r\n"
        b"Content-Type: application/sdp\r\n"
        b"l: 150\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.1\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.1\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "dblreq": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:j.user@example.com;tag=43251j3j324\r\n"
        b"Max-Forwards: 8\r\n"
        b"I: dblreq.0ha0isndaksdj99sdfafnl3lk233412\r\n"
        b"Contact: sip:j.user@host.example.com\r\n"
        b"CSeq: 8 REGISTER\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.125;branch=z9hG4bKkdjuw23492\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
        b"\r\n"
        b"INVITE sip:joe@example.com SIP/2.0\r\n"
        b"t: sip:joe@example.com\r\n"
        b"From: sip:caller@example.net;tag=141334\r\n"
        b"Max-Forwards: 8\r\n"
        b"Call-ID: dblreq.0ha0isnda977644900765@192.0.2.15\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKkdjuw380234\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 150\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.15\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.15\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m =video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
        b"\r\n"
    ),
    "semiuri": (
        b"OPTIONS sip:user;par=u%40example.net@example.com SIP/2.0\r\n"
        b"To: sip:j_user@example.com\r\n"
        b"From: sip:caller@example.org;tag=33242\r\n"
        b"Max-Forwards: 3\r\n"
        b"Call-ID: semiuri.0ha0isndaksdj\r\n"
        b"CSeq: 8 OPTIONS\r\n"
        b"Accept: application/sdp, application/pkcs7-mime,\r\n"
        b"        multipart/mixed, multipart/signed,\r\n"
        b"        message/sip, message/sipfrag\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKkdjuw\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "transports": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: <sip:caller@example.com>;tag=323\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID:  transports.kijh4akdnaqjkwendsasfdj\r\n"
        b"Accept: application/sdp\r\n"
        b"CSeq: 60 OPTIONS\r\n"
        b"Via: SIP/2.0/UDP t1.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Via: SIP/2.0/SCTP t2.example.com;branch=z9hG4bKklasjdhf\r\n"
        b"Via: SIP/2.0/TLS t3.example.com;branch=z9hG4bK2980unddj\r\n"
        b"Via: SIP/2.0/UNKNOWN t4.example.com;branch=z9hG4bKasd0f3en\r\n"
        b"Via: SIP/2.0/TCP t5.example.com;branch=z9hG4bK0a9idfnee\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "mpart01": (
        b"MESSAGE sip:kumiko@example.org SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-d87543-4dade06d0bdb11ee-1--d87543-;rport\r\n"
        b"Max-Forwards: 70\r\n"
        b"Route: <sip:127.0.0.1:5080>\r\n"
        b"Identity: r5mwreLuyDRYBi/0TiPwEsY3rEVsk/G2WxhgTV1PF7hHuLIK0YWVKZhKv9Mj8UeXqkMVbnVq37CD+813"
        b"gvYjcBUaZngQmXc9WNZSDNGCzA+fWl9MEUHWIZo1CeJebdY/XlgKeTa0Olvq0rt70Q5jiSfbqMJmQFteeivUhkMWYU"
        b"A=\r\n"
        b"Contact: <sip:fluffy@127.0.0.1:5070>\r\n"
        b"To: <sip:kumiko@example.org>\r\n"
        b"From: <sip:fluffy@example.com>;tag=2fb0dcc9\r\n"
        b"Call-ID: 3d9485ad0c49859b@Zmx1ZmZ5LW1hYy0xNi5sb2NhbA..\r\n"
        b"CSeq: 1 MESSAGE\r\n"
        b"Content-Transfer-Encoding: binary\r\n"
        b"Content-Type: multipart/mixed;boundary=7a9cbec02ceef655\r\n"
        b"Date: Sat, 15 Oct 2005 04:44:56 GMT\r\n"
        b"User-Agent: SIPimp.org/0.2.5 (curses)\r\n"
        b"Content-Length: 553\r\n"
        b"\r\n"
        b"--7a9cbec02ceef655\r\n"
        b"Content-Type: text/plain\r\n"
        b"Content-Transfer-Encoding: binary\r\n"
        b"\r\n"
        b"Hello\r\n"
        b"--7a9cbec02ceef655\r\n"
        b"Content-Type: application/octet-stream\r\n"
        b"Content-Transfer-Encoding: binary\r\n"
        b"\r\n"
        b"0\x82\x01R\x06\t*\x86H\x86\xf7\r\x01\x07\x02\xa0\x82\x01C0\x82\x01?\x02\x01\x011\t0\x07\x06\x05+\x0e\x03\x02\x1a0\x0b\x06\t*\x86H\x86\xf7\r\x01\x07\x011\x82\x01 0\x82\x01\x1c\x02\x01\x010|0p1\x0b0\t\x06\x03U\x04\x06\x13\x02US1\x130\x11\x06\x03U\x04\x08\x13\nC"
        b"alifornia1\x110\x0f\x06\x03U\x04\x07\x13\x08San Jose1\x0e0\x0c\x06\x03U\x04\n\x13\x05sipit1)0'\x06\x03U\x04\x0b\x13 Sipit Test Certificate Authority\x02\x08\x01"
        b"\x95\x00q\x023\x01\x130\x07\x06\x05+\x0e\x03\x02\x1a0\r\x06\t*\x86H\x86\xf7\r\x01\x01\x01\x05\x00\x04\x81\x80\x8e\xf4f\xf9H\xf0R-\xd2\xe5\x97\x8e\x9d\x95\xaa\xe9\xf2\xfe\x15\xa0fYqb\x92\xe8\xda*\xa8\xd85\nh\xce\xff\xae<\xbd+\xff\x16u\xdd\xd5d\x8eY=\xd6G(\xf2b \xf7\xe9"
        b"At\x9e3\r\x9a\x15\xed\xab\xdb\x93\xd1\x0cB\x10.{r\x89\xd2\x9c\xc0\xc9\xae.\xfb\xc7\xc0\xcf\xf9\x17/;\x02~O\xc0'\xe1Tm\xe4\xb6\xaa:\xbb>f\xcc\xcb]\xd6\xc6K\x83\x83\x14\x9c\xb8\xe6\xff\x18-\x94O\xe5{e\xbc\x99\xd0\x05\r\n"
        b"--7a9cbec02ceef655--\r\n"
    ),
    "unreason": (
        b"SIP/2.0 200 = 2**3 * 5**2 \xd0\xbd\xd0\xbe \xd1\x81\xd1\x82\xd0\xbe \xd0\xb4\xd0\xb5\xd0\xb2\xd1\x8f\xd0\xbd\xd0\xbe\xd1\x81\xd1\x82\xd0\xbe \xd0\xb4\xd0\xb5\xd0\xb2\xd1\x8f\xd1\x82\xd1\x8c - \xd0\xbf\xd1\x80\xd0\xbe\xd1\x81\xd1\x82\xd0\xbe\xd0\xb5\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.198;branch=z9hG4bK1324923\r\n"
        b"Call-ID: unreason.1234ksdfak3j2erwedfsASdf\r\n"
        b"CSeq: 35 INVITE\r\n"
        b"From: sip:user@example.com;tag=11141343\r\n"
        b"To: sip:user@example.edu;tag=2229\r\n"
        b"Content-Length: 154\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Contact: <sip:user@host198.example.com>\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.198\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.198\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "noreason": (
        b"SIP/2.0 100 \r\n"
        b"Via: SIP/2.0/UDP 192.0.2.105;branch=z9hG4bK2398ndaoe\r\n"
        b"Call-ID: noreason.asndj203insdf99223ndf\r\n"
        b"CSeq: 35 INVITE\r\n"
        b"From: <sip:user@example.com>;tag=39ansfi3\r\n"
        b"To: <sip:user@example.edu>;tag=902jndnke3\r\n"
        b"Content-Length: 0\r\n"
        b"Contact: <sip:user@host105.example.com>\r\n"
        b"\r\n"
    ),
    "badinv01": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:caller@example.net;tag=134161461246\r\n"
        b"Max-Forwards: 7\r\n"
        b"Call-ID: badinv01.0ha0isndaksdjasdf3234nas\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.15;;,;,,\r\n"
        b'Contact: "Joe" <sip:joe@example.org>;;;;\r\n'
        b"Content-Length: 152\r\n"
        b"Content-Type: application/sdp\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.15\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.15\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "clerr": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"Max-Forwards: 80\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:caller@example.net;tag=93942939o2\r\n"
        b"Contact: <sip:caller@hungry.example.net>\r\n"
        b"Call-ID: clerr.0ha0isndaksdjweiafasdk3\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Via: SIP/2.0/UDP host5.example.com;branch=z9hG4bK-39234-23523\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 9999\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.155\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.155\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "ncl": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"Max-Forwards: 254\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:caller@example.net;tag=32394234\r\n"
        b"Call-ID: ncl.0ha0isndaksdj2193423r542w35\r\n"
        b"CSeq: 0 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.53;branch=z9hG4bKkdjuw\r\n"
        b"Contact: <sip:caller@example53.example.net>\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: -999\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.53\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.53\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "scalar02": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"Via: SIP/2.0/TCP host129.example.com;branch=z9hG4bK342sdfoi3\r\n"
        b"To: <sip:user@example.com>\r\n"
        b"From: <sip:user@example.com>;tag=239232jh3\r\n"
        b"CSeq: 36893488147419103232 REGISTER\r\n"
        b"Call-ID: scalar02.23o0pd9vanlq3wnrlnewofjas9ui32\r\n"
        b"Max-Forwards: 300\r\n"
        b"Expires: 100000000000000000000000000000000000000000000000000000000000000000000000000000000"
        b"00000000000000000000\r\n"
        b"Contact: <sip:user@host129.example.com>\r\n"
        b"  ;expires=280297596632815\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "scalarlg": (
        b"SIP/2.0 503 Service Unavailable\r\n"
        b"Via: SIP/2.0/TCP host129.example.com;branch=z9hG4bKzzxdiwo34sw;received=192.0.2.129\r\n"
        b"To: <sip:user@example.com>\r\n"
        b"From: <sip:other@example.net>;tag=2easdjfejw\r\n"
        b"CSeq: 9292394834772304023312 OPTIONS\r\n"
        b"Call-ID: scalarlg.noase0of0234hn2qofoaf0232aewf2394r\r\n"
        b"Retry-After: 949302838503028349304023988\r\n"
        b'Warning: 1812 overture "In Progress"\r\n'
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "quotbal": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b'To: "Mr. J. User <sip:j.user@example.com>\r\n'
        b"From: sip:caller@example.net;tag=93334\r\n"
        b"Max-Forwards: 10\r\n"
        b"Call-ID: quotbal.aksdj\r\n"
        b"Contact: <sip:caller@host59.example.net>\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.59:5050;branch=z9hG4bKkdjuw39234\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 152\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.15\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.15\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "ltgtruri": (
        b"INVITE <sip:user@example.com> SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=39291\r\n"
        b"Max-Forwards: 23\r\n"
        b"Call-ID: ltgtruri.1@192.0.2.5\r\n"
        b"CSeq: 1 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.5\r\n"
        b"Contact: <sip:caller@host5.example.net>\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 159\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.5\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.5\r\n"
        b"t=3149328700 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "lwsruri": (
        b"INVITE sip:user@example.com; lr SIP/2.0\r\n"
        b"To: sip:user@example.com;tag=3xfe-9921883-z9f\r\n"
        b"From: sip:caller@example.net;tag=231413434\r\n"
        b"Max-Forwards: 5\r\n"
        b"Call-ID: lwsruri.asdfasdoeoi2323-asdfwrn23-asd834rk423\r\n"
        b"CSeq: 2130706432 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKkdjuw2395\r\n"
        b"Contact: <sip:caller@host1.example.net>\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 159\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.1\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.1\r\n"
        b"t=3149328700 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "lwsstart": (
        b"INVITE  sip:user@example.com  SIP/2.0\r\n"
        b"Max-Forwards: 8\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=8814\r\n"
        b"Call-ID: lwsstart.dfknq234oi243099adsdfnawe3@example.com\r\n"
        b"CSeq: 1893884 INVITE\r\n"
        b"Via: SIP/2.0/UDP host1.example.com;branch=z9hG4bKkdjuw3923\r\n"
        b"Contact: <sip:caller@host1.example.net>\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 150\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.1\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.1\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "trws": (
        b"OPTIONS sip:remote-target@example.com SIP/2.0  \r\n"
        b"Via: SIP/2.0/TCP host1.examle.com;branch=z9hG4bK299342093\r\n"
        b"To: <sip:remote-target@example.com>\r\n"
        b"From: <sip:local-resource@example.com>;tag=329429089\r\n"
        b"Call-ID: trws.oicu34958239neffasdhr2345r\r\n"
        b"Accept: application/sdp\r\n"
        b"CSeq: 238923 OPTIONS\r\n"
        b"Max-Forwards: 70\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "escruri": (
        b"INVITE sip:user@example.com?Route=%3Csip:example.com%3E SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=341518\r\n"
        b"Max-Forwards: 7\r\n"
        b"Contact: <sip:caller@host39923.example.net>\r\n"
        b"Call-ID: escruri.23940-asdfhj-aje3br-234q098w-fawerh2q-h4n5\r\n"
        b"CSeq: 149209342 INVITE\r\n"
        b"Via: SIP/2.0/UDP host-of-the-hour.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 150\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.1\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.1\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "baddate": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=2234923\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID: baddate.239423mnsadf3j23lj42--sedfnm234\r\n"
        b"CSeq: 1392934 INVITE\r\n"
        b"Via: SIP/2.0/UDP host.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Date: Fri, 01 Jan 2010 16:00:00 EST\r\n"
        b"Contact: <sip:caller@host5.example.net>\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Content-Length: 150\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.5\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.5\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "regbadct": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:user@example.com;tag=998332\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID: regbadct.k345asrl3fdbv@10.0.0.1\r\n"
        b"CSeq: 1 REGISTER\r\n"
        b"Via: SIP/2.0/UDP 135.180.130.133:5060;branch=z9hG4bKkdjuw\r\n"
        b"Contact: sip:user@example.com?Route=%3Csip:sip.example.com%3E\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "badaspec": (
        b"OPTIONS sip:user@example.org SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP host4.example.com:5060;branch=z9hG4bKkdju43234\r\n"
        b"Max-Forwards: 70\r\n"
        b'From: "Bell, Alexander" <sip:a.g.bell@example.com>;tag=433423\r\n'
        b'To: "Watson, Thomas" < sip:t.watson@example.org >\r\n'
        b"Call-ID: badaspec.sdf0234n2nds0a099u23h3hnnw009cdkne3\r\n"
        b"Accept: application/sdp\r\n"
        b"CSeq: 3923239 OPTIONS\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "baddn": (
        b"OPTIONS sip:t.watson@example.org SIP/2.0\r\n"
        b"Via:     SIP/2.0/UDP c.example.com:5060;branch=z9hG4bKkdjuw\r\n"
        b"Max-Forwards:      70\r\n"
        b"From:    Bell, Alexander <sip:a.g.bell@example.com>;tag=43\r\n"
        b"To:      Watson, Thomas <sip:t.watson@example.org>\r\n"
        b"Call-ID: baddn.31415@c.example.com\r\n"
        b"Accept: application/sdp\r\n"
        b"CSeq:    3923239 OPTIONS\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "badvers": (
        b"OPTIONS sip:t.watson@example.org SIP/7.0\r\n"
        b"Via:     SIP/7.0/UDP c.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Max-Forwards:     70\r\n"
        b"From:    A. Bell <sip:a.g.bell@example.com>;tag=qweoiqpe\r\n"
        b"To:      T. Watson <sip:t.watson@example.org>\r\n"
        b"Call-ID: badvers.31417@c.example.com\r\n"
        b"CSeq:    1 OPTIONS\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "mismatch01": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:caller@example.net;tag=34525\r\n"
        b"Max-Forwards: 6\r\n"
        b"Call-ID: mismatch01.dj0234sxdfl3\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Via: SIP/2.0/UDP host.example.com;branch=z9hG4bKkdjuw\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "mismatch02": (
        b"NEWMETHOD sip:user@example.com SIP/2.0\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:caller@example.net;tag=34525\r\n"
        b"Max-Forwards: 6\r\n"
        b"Call-ID: mismatch02.dj0234sxdfl3\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Contact: <sip:caller@host.example.net>\r\n"
        b"Via: SIP/2.0/UDP host.example.net;branch=z9hG4bKkdjuw\r\n"
        b"Content-Type: application/sdp\r\n"
        b"l: 138\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.1\r\n"
        b"c=IN IP4 192.0.2.1\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "bigcode": (
        b"SIP/2.0 4294967301 better not break the receiver\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.105;branch=z9hG4bK2398ndaoe\r\n"
        b"Call-ID: bigcode.asdof3uj203asdnf3429uasdhfas3ehjasdfas9i\r\n"
        b"CSeq: 353494 INVITE\r\n"
        b"From: <sip:user@example.com>;tag=39ansfi3\r\n"
        b"To: <sip:user@example.edu>;tag=902jndnke3\r\n"
        b"Content-Length: 0\r\n"
        b"Contact: <sip:user@host105.example.com>\r\n"
        b"\r\n"
    ),
    "badbranch": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.org;tag=33242\r\n"
        b"Max-Forwards: 3\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK\r\n"
        b"Accept: application/sdp\r\n"
        b"Call-ID: badbranch.sadonfo23i420jv0as0derf3j3n\r\n"
        b"CSeq: 8 OPTIONS\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "insuf": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"CSeq: 193942 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.95;branch=z9hG4bKkdj.insuf\r\n"
        b"Content-Type: application/sdp\r\n"
        b"l: 152\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.95\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.95\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "unkscm": (
        b"OPTIONS nobodyKnowsThisScheme:totallyopaquecontent SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=384\r\n"
        b"Max-Forwards: 3\r\n"
        b"Call-ID: unkscm.nasdfasser0q239nwsdfasdkl34\r\n"
        b"CSeq: 3923423 OPTIONS\r\n"
        b"Via: SIP/2.0/TCP host9.example.com;branch=z9hG4bKkdjuw39234\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "novelsc": (
        b"OPTIONS soap.beep://192.0.2.103:3002 SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=384\r\n"
        b"Max-Forwards: 3\r\n"
        b"Call-ID: novelsc.asdfasser0q239nwsdfasdkl34\r\n"
        b"CSeq: 3923423 OPTIONS\r\n"
        b"Via: SIP/2.0/TCP host9.example.com;branch=z9hG4bKkdjuw39234\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "unksm2": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"To: isbn:2983792873\r\n"
        b"From: <http://www.example.com>;tag=3234233\r\n"
        b"Call-ID: unksm2.daksdj@hyphenated-host.example.com\r\n"
        b"CSeq: 234902 REGISTER\r\n"
        b"Max-Forwards: 70\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.21:5060;branch=z9hG4bKkdjuw\r\n"
        b"Contact: <name:John_Smith>\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "bext01": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"To: sip:j_user@example.com\r\n"
        b"From: sip:caller@example.net;tag=242etr\r\n"
        b"Max-Forwards: 6\r\n"
        b"Call-ID: bext01.0ha0isndaksdj\r\n"
        b"Require: nothingSupportsThis, nothingSupportsThisEither\r\n"
        b"Proxy-Require: noProxiesSupportThis, norDoAnyProxiesSupportThis\r\n"
        b"CSeq: 8 OPTIONS\r\n"
        b"Via: SIP/2.0/TLS fold-and-staple.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "invut": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"Contact: <sip:caller@host5.example.net>\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:caller@example.net;tag=8392034\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID: invut.0ha0isndaksdjadsfij34n23d\r\n"
        b"CSeq: 235448 INVITE\r\n"
        b"Via: SIP/2.0/UDP somehost.example.com;branch=z9hG4bKkdjuw\r\n"
        b"Content-Type: application/unknownformat\r\n"
        b"Content-Length: 40\r\n"
        b"\r\n"
        b"<audio>\r\n"
        b' <pcmu port="443"/>\r\n'
        b"</audio>\r\n"
    ),
    "regaut01": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"To: sip:j.user@example.com\r\n"
        b"From: sip:j.user@example.com;tag=87321hj23128\r\n"
        b"Max-Forwards: 8\r\n"
        b"Call-ID: regaut01.0ha0isndaksdj\r\n"
        b"CSeq: 9338 REGISTER\r\n"
        b"Via: SIP/2.0/TCP 192.0.2.253;branch=z9hG4bKkdjuw\r\n"
        b"Authorization: NoOneKnowsThisScheme opaque-data=here\r\n"
        b"Content-Length:0\r\n"
        b"\r\n"
    ),
    "multi01": (
        b"INVITE sip:user@company.com SIP/2.0\r\n"
        b"Contact: <sip:caller@host25.example.net>\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.25;branch=z9hG4bKkdjuw\r\n"
        b"Max-Forwards: 70\r\n"
        b"CSeq: 5 INVITE\r\n"
        b"Call-ID: multi01.98asdh@192.0.2.1\r\n"
        b"CSeq: 59 INVITE\r\n"
        b"Call-ID: multi01.98asdh@192.0.2.2\r\n"
        b"From: sip:caller@example.com;tag=3413415\r\n"
        b"To: sip:user@example.com\r\n"
        b"To: sip:other@example.net\r\n"
        b"From: sip:caller@example.net;tag=2923420123\r\n"
        b"Content-Type: application/sdp\r\n"
        b"l: 154\r\n"
        b"Contact: <sip:caller@host36.example.net>\r\n"
        b"Max-Forwards: 5\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.25\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.25\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
        b"\r\n"
    ),
    "mcl01": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP host5.example.net;branch=z9hG4bK293423\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:other@example.net;tag=3923942\r\n"
        b"Call-ID: mcl01.fhn2323orihawfdoa3o4r52o3irsdf\r\n"
        b"CSeq: 15932 OPTIONS\r\n"
        b"Content-Length: 13\r\n"
        b"Max-Forwards: 60\r\n"
        b"Content-Length: 5\r\n"
        b"Content-Type: text/plain\r\n"
        b"\r\n"
        b"There's no way to know how many octets are supposed to be here.\r\n"
        b"\r\n"
    ),
    "bcast": (
        b"SIP/2.0 200 OK\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.198;branch=z9hG4bK1324923\r\n"
        b"Via: SIP/2.0/UDP 255.255.255.255;branch=z9hG4bK1saber23\r\n"
        b"Call-ID: bcast.0384840201234ksdfak3j2erwedfsASdf\r\n"
        b"CSeq: 35 INVITE\r\n"
        b"From: sip:user@example.com;tag=11141343\r\n"
        b"To: sip:user@example.edu;tag=2229\r\n"
        b"Content-Length: 154\r\n"
        b"Content-Type: application/sdp\r\n"
        b"Contact: <sip:user@host28.example.com>\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.198\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.198\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "zeromf": (
        b"OPTIONS sip:user@example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:caller@example.net;tag=3ghsd41\r\n"
        b"Call-ID: zeromf.jfasdlfnm2o2l43r5u0asdfas\r\n"
        b"CSeq: 39234321 OPTIONS\r\n"
        b"Via: SIP/2.0/UDP host1.example.com;branch=z9hG4bKkdjuw2349i\r\n"
        b"Max-Forwards: 0\r\n"
        b"Content-Length: 0\r\n"
        b"\r\n"
    ),
    "cparam01": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP saturn.example.com:5060;branch=z9hG4bKkdjuw\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: sip:watson@example.com;tag=DkfVgjkrtMwaerKKpe\r\n"
        b"To: sip:watson@example.com\r\n"
        b"Call-ID: cparam01.70710@saturn.example.com\r\n"
        b"CSeq: 2 REGISTER\r\n"
        b"Contact: sip:+19725552222@gw1.example.net;unknownparam\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "cparam02": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP saturn.example.com:5060;branch=z9hG4bKkdjuw\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: sip:watson@example.com;tag=838293\r\n"
        b"To: sip:watson@example.com\r\n"
        b"Call-ID: cparam02.70710@saturn.example.com\r\n"
        b"CSeq: 3 REGISTER\r\n"
        b"Contact: <sip:+19725552222@gw1.example.net;unknownparam>\r\n"
        b"l: 0\r\n"
        b"\r\n"
    ),
    "regescrt": (
        b"REGISTER sip:example.com SIP/2.0\r\n"
        b"To: sip:user@example.com\r\n"
        b"From: sip:user@example.com;tag=8\r\n"
        b"Max-Forwards: 70\r\n"
        b"Call-ID: regescrt.k345asrl3fdbv@192.0.2.1\r\n"
        b"CSeq: 14398234 REGISTER\r\n"
        b"Via: SIP/2.0/UDP host5.example.com;branch=z9hG4bKkdjuw\r\n"
        b"M: <sip:user@example.com?Route=%3Csip:sip.example.com%3E>\r\n"
        b"L:0\r\n"
        b"\r\n"
    ),
    "sdp01": (
        b"INVITE sip:user@example.com SIP/2.0\r\n"
        b"To: sip:j_user@example.com\r\n"
        b"Contact: <sip:caller@host15.example.net>\r\n"
        b"From: sip:caller@example.net;tag=234\r\n"
        b"Max-Forwards: 5\r\n"
        b"Call-ID: sdp01.ndaksdj9342dasdd\r\n"
        b"Accept: text/nobodyKnowsThis\r\n"
        b"CSeq: 8 INVITE\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKkdjuw\r\n"
        b"Content-Length: 150\r\n"
        b"Content-Type: application/sdp\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.5\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.5\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0 12\r\n"
        b"m=video 3227 RTP/AVP 31\r\n"
        b"a=rtpmap:31 LPC\r\n"
    ),
    "inv2543": (
        b"INVITE sip:UserB@example.com SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP iftgw.example.com\r\n"
        b"From: <sip:+13035551111@ift.client.example.net;user=phone>\r\n"
        b"Record-Route: <sip:UserB@example.com;maddr=ss1.example.com>\r\n"
        b"To: sip:+16505552222@ss1.example.net;user=phone\r\n"
        b"Call-ID: inv2543.1717@ift.client.example.com\r\n"
        b"CSeq: 56 INVITE\r\n"
        b"Content-Type: application/sdp\r\n"
        b"\r\n"
        b"v=0\r\n"
        b"o=mhandley 29739 7272939 IN IP4 192.0.2.5\r\n"
        b"s=-\r\n"
        b"c=IN IP4 192.0.2.5\r\n"
        b"t=0 0\r\n"
        b"m=audio 49217 RTP/AVP 0\r\n"
    ),
}

# RFC 4475 section and what this user agent server does with each message:
# int = the response it gets, None = served, "response" = a response (dropped: no transaction of ours),
# ("parse", status) = refused while framing with that status.
VALID = {  # 3.1.1 valid messages: all must parse
    "wsinv": ("3.1.1.1", None),
    "intmeth": ("3.1.1.2", 501),  # unknown method
    "esc01": ("3.1.1.3", None),
    "escnull": ("3.1.1.4", 405),  # REGISTER is not served here
    "esc02": ("3.1.1.5", 501),  # RE%47IST%45R is not REGISTER
    "lwsdisp": ("3.1.1.6", None),
    "longreq": ("3.1.1.7", None),
    "dblreq": ("3.1.1.8", 405),  # only the first message of the datagram counts
    "semiuri": ("3.1.1.9", None),
    "transports": ("3.1.1.10", None),
    "mpart01": ("3.1.1.11", 405),
    "unreason": ("3.1.1.12", "response"),
    "noreason": ("3.1.1.13", "response"),
}
INVALID = {  # 3.1.2 invalid messages: 400 (505 for the version), or dropped
    "badinv01": ("3.1.2.1", 400),
    "clerr": ("3.1.2.2", ("parse", 400)),
    "ncl": ("3.1.2.3", ("parse", 400)),
    "scalar02": ("3.1.2.4", 400),
    "scalarlg": ("3.1.2.5", "response"),
    "quotbal": ("3.1.2.6", 400),
    "ltgtruri": ("3.1.2.7", 400),
    "lwsruri": ("3.1.2.8", ("parse", 400)),
    "lwsstart": ("3.1.2.9", ("parse", 400)),
    "trws": ("3.1.2.10", ("parse", 400)),
    "escruri": ("3.1.2.11", 400),
    "baddate": ("3.1.2.12", 400),
    "regbadct": ("3.1.2.13", 400),
    "badaspec": ("3.1.2.14", 400),
    "baddn": ("3.1.2.15", 400),
    "badvers": ("3.1.2.16", ("parse", 505)),
    "mismatch01": ("3.1.2.17", 400),
    "mismatch02": ("3.1.2.18", 400),
    "bigcode": ("3.1.2.19", ("parse", 400)),
}
SEMANTIC = {  # 3.2 transaction layer, 3.3 application layer, 3.4 backward compatibility
    "badbranch": ("3.2.1", None),
    "insuf": ("3.3.1", 400),
    "unkscm": ("3.3.2", 416),
    "novelsc": ("3.3.3", 416),
    "unksm2": ("3.3.4", 405),
    "bext01": ("3.3.5", 420),
    "invut": ("3.3.6", 415),
    "regaut01": ("3.3.7", 405),
    "multi01": ("3.3.8", 400),
    "mcl01": ("3.3.9", ("parse", 400)),
    "bcast": ("3.3.10", "response"),
    "zeromf": ("3.3.11", None),
    "cparam01": ("3.3.12", 405),
    "cparam02": ("3.3.13", 405),
    "regescrt": ("3.3.14", 405),
    "sdp01": ("3.3.15", 406),
    "inv2543": ("3.4.1", None),
}
EXPECTED = {**VALID, **INVALID, **SEMANTIC}


def test_every_message_of_the_rfc_is_covered() -> None:
    assert set(EXPECTED) == set(MESSAGES)
    assert len(MESSAGES) == 49


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_torture_message_outcome(name: str) -> None:
    section, expected = EXPECTED[name]
    data = MESSAGES[name]
    if isinstance(expected, tuple):
        with pytest.raises(SipSyntaxError) as caught:
            parse_message(data)
        assert caught.value.status == expected[1], f"RFC 4475 {section} {name}: {caught.value.problem}"
        return
    message = parse_message(data)
    if expected == "response":
        assert isinstance(message, SipResponse)
        return
    assert isinstance(message, SipRequest)
    rejection = check_request(message)
    got = None if rejection is None else rejection.status
    assert got == expected, f"RFC 4475 {section} {name}: {rejection}"


def test_tortuous_invite_fields_are_read_correctly() -> None:
    message = parse_message(MESSAGES["wsinv"])
    assert isinstance(message, SipRequest)
    assert parse_name_addr(message.get("To") or "", "To").tag == "1918181833n"
    sender = parse_name_addr(message.get("From") or "", "From")
    assert (sender.display, sender.uri, sender.tag) == (
        '"J Rosenberg \\\\\\""',
        "sip:jdrosen@example.com",
        "98asjd8",
    )
    assert int(message.get("Max-Forwards") or "") == 68
    assert message.get("CSeq") == "0009 INVITE"
    hops = [parse_via(hop) for hop in message.get_list("Via")]
    assert [(h.transport, h.host, h.branch) for h in hops] == [
        ("UDP", "192.0.2.2", "390skdjuw"),
        ("TCP", "spindle.example.com", "z9hG4bK9ikj8"),
        ("UDP", "192.168.255.111", "z9hG4bK30239"),
    ]
    contact = parse_name_addr(message.get("Contact") or "", "Contact")
    assert contact.params == {"newparam": "newvalue", "secondparam": None, "q": "0.33"}
    assert message.get("Subject") == ""
    assert message.get("NewFangledHeader") == "newfangled value continued newfangled value"
    assert len(message.body) == 150 and message.body.endswith(b"a=rtpmap:31 LPC\r\n")


def test_other_valid_messages_keep_their_details() -> None:
    transports = parse_message(MESSAGES["transports"])
    assert [parse_via(hop).transport for hop in transports.get_list("Via")] == [
        "UDP",
        "SCTP",
        "TLS",
        "UNKNOWN",
        "TCP",
    ]
    dblreq = parse_message(MESSAGES["dblreq"])
    assert isinstance(dblreq, SipRequest) and dblreq.method == "REGISTER" and dblreq.body == b""
    esc02 = parse_message(MESSAGES["esc02"])
    assert len(esc02.get_list("Contact")) == 2 and esc02.get("C%6Fntact") == "<sip:alias2@host2.example.com>"
    assert len(parse_message(MESSAGES["mpart01"]).body) == 553
    longreq = parse_message(MESSAGES["longreq"])
    assert len(longreq.get_list("Via")) == 34 and len(longreq.body) == 150
    noreason = parse_message(MESSAGES["noreason"])
    assert isinstance(noreason, SipResponse) and (noreason.status, noreason.reason) == (100, "")
    intmeth = parse_message(MESSAGES["intmeth"])
    assert isinstance(intmeth, SipRequest) and intmeth.method == "!interesting-Method0123456789_*+`.%indeed'~"
    assert parse_name_addr(intmeth.get("From") or "", "From").tag == "_token~1'+`*%!-."


# Requests a server would serve by starting a call are left out on the wire: their SDP points at
# documentation addresses (192.0.2.x) and the tests send nothing beyond loopback.
ON_THE_WIRE = sorted(
    name
    for name, (_, outcome) in EXPECTED.items()
    if not (outcome is None and MESSAGES[name].startswith(b"INVITE"))
)


def test_server_answers_or_drops_every_torture_message_and_keeps_serving() -> None:
    async def scenario() -> dict[str, bytes | None]:
        async with running_server(EchoHandler()) as server:
            sockets = {}
            for name in ON_THE_WIRE:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.bind((LOOPBACK, 0))
                sock.setblocking(False)
                sockets[name] = sock
                await send_datagram(sock, MESSAGES[name], (LOOPBACK, server.local_port))
            await asyncio.sleep(0.6)
            replies: dict[str, bytes | None] = {}
            for name, sock in sockets.items():
                try:
                    replies[name] = sock.recv(65535)
                except BlockingIOError:
                    replies[name] = None
                sock.close()
            assert server.stats.internal_errors == 0
            assert server.calls == {}
            replies["__alive__"] = await _options_roundtrip(server.local_port)
            return replies

    replies = asyncio.run(scenario())
    for name in ON_THE_WIRE:
        section, expected = EXPECTED[name]
        reply = replies[name]
        if expected == "response" or (isinstance(expected, tuple) and name == "bigcode"):
            assert reply is None, f"{section} {name}: a stray response must be dropped"
            continue
        status = expected[1] if isinstance(expected, tuple) else (200 if expected is None else expected)
        if reply is None:
            assert status in (400, 505), f"{section} {name}: only invalid messages may go unanswered"
            continue
        response = parse_message(reply)
        assert isinstance(response, SipResponse)
        assert response.status == status, f"{section} {name}: {response.status} {response.reason}"
    alive = replies["__alive__"]
    assert alive is not None and alive.startswith(b"SIP/2.0 200 OK")


async def _options_roundtrip(port: int) -> bytes | None:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.setblocking(False)
        local = sock.getsockname()[1]
        options = (
            f"OPTIONS sip:appliance@{LOOPBACK} SIP/2.0\r\nVia: SIP/2.0/UDP {LOOPBACK}:{local};branch=z9hG4bKalive\r\n"
            f"From: <sip:t@{LOOPBACK}>;tag=1\r\nTo: <sip:appliance@{LOOPBACK}>\r\nCall-ID: alive\r\nCSeq: 1 OPTIONS\r\n"
            "Content-Length: 0\r\n\r\n"
        ).encode()
        await send_datagram(sock, options, (LOOPBACK, port))
        try:
            return await asyncio.wait_for(loop.sock_recv(sock, 65535), 2.0)
        except asyncio.TimeoutError:
            return None
