#!/usr/bin/python3
"""A small IPMI BMC for one QEMU machine, on Debian's pyghmi server class (the base virtualbmc uses).

Power on starts QEMU with the machine's arguments plus the current boot device (`-boot order=` under
SeaBIOS, `bootindex` under OVMF) and a new serial log per boot; power off ends QEMU; soft power off asks
the guest through QMP (ACPI power button); the guest powering itself off ends QEMU too, so the power
state is simply whether QEMU runs. Every action is printed with a timestamp for the test's phase table.

Usage: bmc.py CONFIG.json   {port, username, password, firmware: "uefi"|"bios", qemu: [argv...],
                             disk_device: "-device ..." id "disk0", nic_device: "-device ..." id "nic0",
                             state_dir}
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pyghmi.ipmi.bmc as bmc

cfg = json.load(open(sys.argv[1]))


def say(msg):
    print(f'{time.time():.3f} {msg}', flush=True)


class QemuBmc(bmc.Bmc):
    def __init__(self):
        super().__init__({cfg['username']: cfg['password']}, port=cfg['port'], address='127.0.0.1')
        self.proc = None
        self.boots = 0
        self.bootdev = 'network'

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def get_power_state(self):
        return 'on' if self.running() else 'off'

    def get_boot_device(self):
        return self.bootdev

    def set_boot_device(self, bootdevice):
        if bootdevice not in ('network', 'hd'):
            say(f'boot device {bootdevice} refused')
            raise NotImplementedError
        self.bootdev = bootdevice
        say(f'boot device {bootdevice}')

    def boot_args(self):
        net = self.bootdev == 'network'
        if cfg['firmware'] == 'bios':
            return ['-boot', 'order=' + ('n' if net else 'c'), '-device', cfg['disk_device'], '-device', cfg['nic_device']]
        first, second = (cfg['nic_device'], cfg['disk_device']) if net else (cfg['disk_device'], cfg['nic_device'])
        return ['-device', first + ',bootindex=1', '-device', second + ',bootindex=2']

    def power_on(self):
        if self.running():
            return
        self.boots += 1
        d = cfg['state_dir']
        serial = os.path.join(d, f'serial-{self.boots}-{self.bootdev}.log')
        qmp = os.path.join(d, 'qmp.sock')
        if os.path.exists(qmp):
            os.unlink(qmp)
        argv = cfg['qemu'] + self.boot_args() + [
            '-chardev', f'file,id=s0,path={serial}', '-serial', 'chardev:s0',
            '-qmp', f'unix:{qmp},server=on,wait=off']
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(os.path.join(d, 'qemu.out'), 'a'),
                                     stderr=subprocess.STDOUT)
        say(f'power on boot={self.boots} device={self.bootdev} pid={self.proc.pid} serial={serial}')

    def power_off(self):
        if not self.running():
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        say('power off')

    def power_shutdown(self):
        if not self.running():
            return
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(os.path.join(cfg['state_dir'], 'qmp.sock'))
            f = s.makefile('rw')
            f.readline()
            for cmd in ('qmp_capabilities', 'system_powerdown'):
                f.write(json.dumps({'execute': cmd}) + '\n')
                f.flush()
                f.readline()
            s.close()
            say('soft power off requested')
        except OSError as e:
            say(f'soft power off failed: {e}')
            return 0xff

    def power_reset(self):
        self.power_off()
        self.power_on()

    def power_cycle(self):
        self.power_reset()

    def cold_reset(self):
        pass


def main():
    b = QemuBmc()

    def stop(*_):
        b.power_off()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    say(f'listening on 127.0.0.1:{cfg["port"]}')
    last = 'off'
    while True:
        bmc.ipmisession.Session.wait_for_rsp(timeout=1)
        now = b.get_power_state()
        if now != last:
            if now == 'off':
                say(f'guest powered off (qemu exit {b.proc.returncode})')
            last = now


if __name__ == '__main__':
    main()
