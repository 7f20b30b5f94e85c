// `dmi`: dmidecode's BIOS, processor and memory tables with its own labels as keys, in IPA's grouping:
// {bios: {…}, cpu: [{…} per processor], memory: {…array…, "Number Of Devices": n, devices: [{…} per DIMM]}}.
// Decoding SMBIOS by hand would re-implement dmidecode's tables; the tool is small (see docs/inspection.md).

type Record_ = Record<string, string | string[]>;
interface Section {
  type: number;
  fields: Record_;
}

/** Sections of `dmidecode` text output: `Handle 0x…, DMI type N, …`, a title line, then `\tKey: value` lines. */
export function parseDmidecode(text: string): Section[] {
  const sections: Section[] = [];
  let current: Section | undefined;
  let listKey: string | undefined;
  for (const line of text.split('\n')) {
    const handle = /^Handle 0x[0-9A-Fa-f]+, DMI type (\d+),/.exec(line);
    if (handle) {
      current = { type: Number(handle[1]), fields: {} };
      sections.push(current);
      listKey = undefined;
      continue;
    }
    if (!current || line.trim() === '') continue;
    if (line.startsWith('\t\t') && listKey) {
      const list = current.fields[listKey];
      current.fields[listKey] = [...(Array.isArray(list) ? list : []), line.trim()];
      continue;
    }
    const kv = /^\t([^:\t]+):\s*(.*)$/.exec(line);
    if (kv) {
      const [, key, value] = kv as unknown as [string, string, string];
      if (value === '') {
        listKey = key;
        current.fields[key] = [];
      } else {
        listKey = undefined;
        current.fields[key] = value;
      }
    }
  }
  return sections;
}

export interface DmiData {
  bios: Record_;
  cpu: Record_[];
  memory: Record<string, unknown> & { devices: Record_[] };
}

export function groupDmi(sections: readonly Section[]): DmiData {
  const bios: Record_ = {};
  const memory: DmiData['memory'] = { devices: [] };
  const cpu: Record_[] = [];
  let devices = 0;
  for (const s of sections) {
    if (s.type === 0 || s.type === 13) Object.assign(bios, s.fields);
    else if (s.type === 4) cpu.push(s.fields);
    else if (s.type === 16) {
      Object.assign(memory, s.fields);
      devices += Number(s.fields['Number Of Devices'] ?? 0) || 0;
    } else if (s.type === 17) memory.devices.push(s.fields);
  }
  memory['Number Of Devices'] = devices;
  return { bios, cpu, memory };
}

export const DMIDECODE_ARGS = ['-t', 'bios', '-t', 'processor', '-t', 'memory'];
