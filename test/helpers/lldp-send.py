# A switch port's LLDP frames, built with scapy's LLDP layers and sent out of IFACE every 100 ms until killed:
# chassis id (MAC), port id (interface name), TTL, system name, one 802.1 "VLAN name" TLV per VLAN id, End.
# The frame's hex goes to stdout first, so the test can compare what the agent reports with what was sent.
#   python3 lldp-send.py IFACE CHASSIS_MAC PORT SYSTEM VLAN[,VLAN...]
import sys
import time

from scapy.all import Ether, sendp
from scapy.contrib.lldp import (LLDPDUChassisID, LLDPDUEndOfLLDPDU, LLDPDUGenericOrganisationSpecific,
                                LLDPDUPortID, LLDPDUSystemName, LLDPDUTimeToLive)

iface, chassis, port, system, vlans = sys.argv[1:6]
tlvs = (LLDPDUChassisID(subtype=4, id=chassis) / LLDPDUPortID(subtype=5, id=port) / LLDPDUTimeToLive(ttl=120)
        / LLDPDUSystemName(system_name=system))
for vid in [int(v) for v in vlans.split(',') if v]:
    name = b'vlan%d' % vid
    data = vid.to_bytes(2, 'big') + bytes([len(name)]) + name
    tlvs = tlvs / LLDPDUGenericOrganisationSpecific(org_code=0x0080c2, subtype=3, data=data)
frame = Ether(dst='01:80:c2:00:00:0e', src=chassis, type=0x88cc) / tlvs / LLDPDUEndOfLLDPDU()
print(bytes(frame).hex(), flush=True)
while True:
    sendp(frame, iface=iface, verbose=False)
    time.sleep(0.1)
