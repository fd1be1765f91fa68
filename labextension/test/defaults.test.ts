import schema from '../schema/plugin.json';
import { DEFAULTS } from '../src/defaults';

describe('the lab defaults', () => {
  it('are the settings schema defaults', () => {
    const properties = schema.properties;
    expect(DEFAULTS.refreshInterval).toBe(properties.refreshInterval.default);
    expect(DEFAULTS.matrixlab_url).toBe(properties.matrixlab_url.default);
    expect(DEFAULTS.timeout_sec.minimum).toBe(properties.timeout_sec.minimum);
    expect(DEFAULTS.timeout_sec.maximum).toBe(properties.timeout_sec.maximum);
  });
});
